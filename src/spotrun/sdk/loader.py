"""A DataLoader that resumes exactly, workers included.

A plain DataLoader over a ``ResumableSampler`` resumes inexactly in three ways, each fixed here:

- Workers read the sampler ahead (``prefetch_factor`` batches each), so the sampler's position runs ahead of
  what the training loop has received, and a resume would skip the prefetched batches. The position saved here
  counts the batches *delivered* to the loop (the DataLoader delivers them in the sampler's order).
- Every new DataLoader iterator draws its workers' base seed from the global torch RNG, so a run resumed
  mid-epoch, which starts one more iterator than an uninterrupted run, continues with another RNG stream
  (dropout, noise). Here the draw comes from the loader's own generator.
- Random transforms in ``dataset[i]``, and a ``collate_fn`` that draws (a masking collator such as 🤗's
  ``DataCollatorForLanguageModeling``), draw from the worker's RNGs, whose state depends on which batches that
  worker fetched before; after a resume the batches go to other workers. In the training process
  (``num_workers=0``) they draw from the loop's own stream, and a loop that fetches a batch ahead (accelerate's
  does; Lightning's not, for a loader with a length) has drawn for the next batch before it saves: resumed, that
  batch is collated again from another state. Here each batch is fetched, and then collated, with the Python,
  NumPy and torch RNGs seeded from (seed, epoch, rank, the batch's position in the epoch; the collation from other
  words than the fetch), so a batch gets the same random transforms and masks in every run, whichever process
  makes it. In the training process the global RNG states are put back after each, so the loop's own stream is
  untouched. A collator with a generator of its own (``DataCollatorForLanguageModeling(seed=...)``) draws from
  that, which this does not reach: leave its seed unset here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from spotrun.sdk.preemption import ignore_preemption_signals, preemption_signals_held
from spotrun.sdk.sampler import ResumableSampler

# DataLoader arguments the loader sets itself: the batching and order are the sampler's.
_OWN_ARGUMENTS = ("sampler", "batch_sampler", "shuffle", "generator")


class ResumableLoader:
    """``DataLoader(dataset, ...)`` batched and shuffled by a ``ResumableSampler``, whose ``state_dict`` is the
    position the training loop has reached. Put it in the training state like a sampler::

        loader = spotrun.ResumableLoader(dataset, batch_size=64, seed=0, num_workers=4)
        state = spotrun.torch_state(model=model, optimizer=opt, sampler=loader)
        batches = loader.stream()

    Every other keyword goes to the DataLoader (``num_workers``, ``collate_fn``, ``pin_memory``,
    ``persistent_workers``, ...). Workers ignore the preemption signals (before any ``worker_init_fn`` of
    yours runs). Map-style datasets only: an iterable dataset has no positions to resume from.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        world_size: int = 1,
        rank: int = 0,
        seed_batches: bool = True,
        **dataloader_arguments: Any,
    ) -> None:
        _check_arguments(dataset, dataloader_arguments)
        self.sampler = ResumableSampler(
            len(dataset),  # type: ignore[arg-type]
            batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, world_size=world_size, rank=rank,
        )
        self.epoch = 0  # where the training loop is: the epoch, and the samples of it delivered so far
        self.position = 0
        user_init = dataloader_arguments.pop("worker_init_fn", None)
        if dataloader_arguments.get("collate_fn") is not None and seed_batches:
            dataloader_arguments["collate_fn"] = _SeededCollation(dataloader_arguments["collate_fn"])
        self.dataloader = DataLoader(
            _SeededBatches(dataset, seed_batches),
            batch_sampler=_TaggedBatches(self.sampler),
            generator=torch.Generator(),
            worker_init_fn=_ignoring_signals_then(user_init),
            **dataloader_arguments,
        )

    def __len__(self) -> int:
        """Batches in the epoch the loop is in, or starts next once this one's last batch was delivered."""
        return self.sampler.items_in(self._next_position()[0])

    def __iter__(self) -> Iterator[Any]:
        """The rest of the current epoch's batches; then the epoch is over. An epoch whose every batch was
        delivered is over even if its iterator was left unfinished (Lightning stops at ``len``)."""
        self._roll_over_delivered_epoch()
        self.sampler.epoch, self.sampler.position = self.epoch, self.position  # drop what was read ahead
        self.dataloader.generator.manual_seed(_words(self.sampler, self.epoch, -1, 1, np.uint64)[0].item())
        with preemption_signals_held():  # workers start here: see preemption_signals_held
            batches = iter(self.dataloader)
        for batch in batches:
            self.position = min(self.position + self.sampler.batch_size, self.sampler.samples_in(self.epoch))
            yield batch
        self.epoch, self.position = self.epoch + 1, 0

    def stream(self) -> Iterator[Any]:
        """Batches from the current position on, across epochs, without end (read ``epoch`` to know where)."""
        while True:
            yield from self

    def state_dict(self) -> dict[str, Any]:
        """Where the loop is; after an epoch's last batch, at the start of the next one."""
        epoch, position = self._next_position()
        return self.sampler.state_at(epoch, position)

    def state_dict_mismatches(self, state: Any) -> list[str]:
        return self.sampler.state_dict_mismatches(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
        self.epoch, self.position = self.sampler.epoch, self.sampler.position
        self._roll_over_delivered_epoch()

    def _next_position(self) -> tuple[int, int]:
        if self.position >= self.sampler.samples_in(self.epoch):
            return self.epoch + 1, 0
        return self.epoch, self.position

    def _roll_over_delivered_epoch(self) -> None:
        self.epoch, self.position = self._next_position()


def _check_arguments(dataset: Dataset, arguments: dict[str, Any]) -> None:
    if isinstance(dataset, IterableDataset):
        raise TypeError("ResumableLoader needs a map-style dataset (with __len__ and __getitem__), not an IterableDataset")
    taken = [name for name in _OWN_ARGUMENTS if name in arguments]
    if taken:
        raise TypeError(
            f"ResumableLoader sets {', '.join(taken)} itself: use its batch_size, shuffle, seed and drop_last instead"
        )
    if arguments.get("in_order") is False:
        raise ValueError("ResumableLoader needs in_order=True: its position counts the batches delivered in order")


class _Batch(list):
    """A batch of indices that carries its seeds to whichever process fetches it (pickled with it)."""

    seed_words: np.ndarray  # the fetch's
    collation_words: np.ndarray


class _Samples(list):
    """A batch's samples as fetched, carrying the seed of their collation to the collate_fn's wrapper."""

    collation_words: np.ndarray | None = None


class _TaggedBatches:
    """The sampler's batches, each tagged with the seed words of its place: (seed, epoch, rank, position)."""

    def __init__(self, sampler: ResumableSampler) -> None:
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[_Batch]:
        epoch, position = self.sampler.epoch, self.sampler.position
        for indices in self.sampler:
            batch = _Batch(indices)
            batch.seed_words = _words(self.sampler, epoch, position, 4, np.uint32)
            batch.collation_words = _words(self.sampler, epoch, position, 4, np.uint32, stage=COLLATION)
            position += len(indices)
            yield batch


COLLATION = 1  # `_words`' stage of a batch's collation; its fetch is stage 0


def _words(
    sampler: ResumableSampler, epoch: int, position: int, count: int, dtype: type, stage: int = 0
) -> np.ndarray:
    """Random words that depend only on the sampler's seed and rank, on ``(epoch, position)`` and on the stage."""
    entropy = [sampler.seed % 2**63, epoch, sampler.rank, position + 1] + ([stage] if stage else [])
    return np.random.SeedSequence(entropy).generate_state(count, dtype)


class _SeededBatches(Dataset):
    """The user's dataset, fetched a batch at a time with every RNG seeded from the batch's tag."""

    def __init__(self, dataset: Dataset, seeded: bool) -> None:
        self.dataset = dataset
        self.seeded = seeded

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, batch: Sequence[int]) -> list[Any]:
        words = getattr(batch, "seed_words", None)
        if not self.seeded or words is None:
            return self._fetch(batch)
        with _seeded_rngs(words):
            samples = _Samples(self._fetch(batch))
        samples.collation_words = getattr(batch, "collation_words", None)
        return samples

    def _fetch(self, batch: Sequence[int]) -> list[Any]:
        own = getattr(self.dataset, "__getitems__", None)
        return list(own(list(batch))) if own else [self.dataset[index] for index in batch]


@contextmanager
def _seeded_rngs(words: np.ndarray) -> Iterator[None]:
    """Python, NumPy and torch (CPU) RNGs seeded from ``words`` inside the block, as they were after it."""
    saved = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    torch.random.default_generator.manual_seed((int(words[0]) << 32) | int(words[1]))  # CPU only, as restored
    random.seed(int(words[2]))
    np.random.seed(words[2:4])
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.random.set_rng_state(saved[2])


class _SeededCollation:
    """A picklable collate_fn: the user's, run with the RNGs seeded for the batch's collation (`_Samples`)."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, samples: list[Any]) -> Any:
        words = getattr(samples, "collation_words", None)
        if words is None:
            return self.collate(samples)
        with _seeded_rngs(words):
            return self.collate(samples)


def _ignoring_signals_then(user_init: Callable[[int], None] | None) -> Callable[[int], None]:
    return ignore_preemption_signals if user_init is None else _InitChain(user_init)


class _InitChain:
    """A picklable worker_init_fn: ignore the preemption signals, then the user's own."""

    def __init__(self, user_init: Callable[[int], None]) -> None:
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        ignore_preemption_signals(worker_id)
        self.user_init(worker_id)
