"""ResumableLoader: a DataLoader (workers included) that resumes at the batch the training loop reached, with
the same random transforms, and leaves the global RNG alone."""

from __future__ import annotations

import random
import signal
from itertools import islice

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

import spotrun


class NoisyDataset(Dataset):
    """Each item is its index plus noise from all three RNGs: a stand-in for random augmentation."""

    def __len__(self) -> int:
        return 37

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = torch.rand(()) + random.random() + float(np.random.rand())
        return torch.tensor([float(index), float(noise)])


def batches_of(loader: spotrun.ResumableLoader, count: int) -> list[torch.Tensor]:
    return [batch.clone() for batch in islice(loader.stream(), count)]


def assert_same_batches(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert torch.equal(got, want), f"batch {index} differs"


def interrupted_and_resumed(make, take, stop_after: int, total: int) -> tuple[list, list]:
    """What a loader from ``make()`` gives in ``total`` batches uninterrupted, and with its state saved after
    ``stop_after`` and loaded into a new one for the rest; ``take(loader, count)`` reads them."""
    uninterrupted = take(make(), total)
    first = make()
    head = take(first, stop_after)
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    return head + take(resumed, total - stop_after), uninterrupted


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_resumed_from_its_state_continues_with_the_same_batches(workers: int) -> None:
    make = lambda: spotrun.ResumableLoader(NoisyDataset(), batch_size=5, seed=3, num_workers=workers)  # noqa: E731
    uninterrupted = batches_of(make(), 20)  # 37 samples: 8 batches per epoch, the last of 2

    first = make()
    head = batches_of(first, 11)  # stops mid-epoch 1, with batches prefetched by the workers
    saved = first.state_dict()
    assert (saved["epoch"], saved["position"]) == (1, 15)
    resumed = make()
    resumed.load_state_dict(saved)
    assert_same_batches(head + batches_of(resumed, 9), uninterrupted)


def test_an_epoch_taken_to_its_length_is_over_though_its_iterator_was_not_finished() -> None:
    """Lightning takes len(loader) batches of an epoch and starts the next epoch's iterator without asking the old
    one for more: the new one must give the next epoch, not the empty rest of the last one."""
    loader = spotrun.ResumableLoader(NoisyDataset(), batch_size=5, seed=3)
    uninterrupted = batches_of(spotrun.ResumableLoader(NoisyDataset(), batch_size=5, seed=3), 16)
    first_epoch = [batch.clone() for batch in islice(iter(loader), len(loader))]
    assert (loader.state_dict()["epoch"], loader.state_dict()["position"]) == (1, 0), "its last batch is delivered"
    resumed = spotrun.ResumableLoader(NoisyDataset(), batch_size=5, seed=3)
    resumed.load_state_dict(loader.state_dict())
    second_epoch = [batch.clone() for batch in islice(iter(loader), len(loader))]
    assert_same_batches(first_epoch + second_epoch, uninterrupted)
    assert resumed.epoch == 1 and torch.equal(next(iter(resumed)), second_epoch[0])


def test_a_loader_of_another_number_of_ranks_delivers_the_rest_of_the_epoch_then_whole_epochs() -> None:
    pair = [spotrun.ResumableLoader(NoisyDataset(), batch_size=3, seed=5, world_size=2, rank=rank) for rank in range(2)]
    seen = [int(item) for loader in pair for batch in batches_of(loader, 2) for item in batch[:, 0]]  # 12 of 37
    alone = spotrun.ResumableLoader(NoisyDataset(), batch_size=3, seed=5)
    alone.load_state_dict(pair[0].state_dict())
    assert len(alone) == 9  # the 25 left, in batches of 3
    rest = [int(item) for batch in batches_of(alone, 9) for item in batch[:, 0]]
    assert sorted(seen + rest) == list(range(37))
    assert alone.state_dict()["epoch"] == 1 and len(alone) == 13  # then whole epochs: 37 in batches of 3


def test_workers_and_the_training_process_fetch_the_same_items() -> None:
    in_process = batches_of(spotrun.ResumableLoader(NoisyDataset(), batch_size=4, seed=1), 12)
    with_workers = batches_of(spotrun.ResumableLoader(NoisyDataset(), batch_size=4, seed=1, num_workers=3), 12)
    assert_same_batches(with_workers, in_process)


def test_epochs_differ_and_the_noise_is_not_the_same_for_every_batch() -> None:
    batches = batches_of(spotrun.ResumableLoader(NoisyDataset(), batch_size=37, seed=0), 2)
    assert not torch.equal(batches[0][:, 0], batches[1][:, 0])  # another order each epoch
    noise = torch.cat(batches)[:, 1]
    assert len(torch.unique(noise)) == len(noise)


def test_iterating_leaves_the_global_rngs_where_they_were() -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    before = torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    batches_of(spotrun.ResumableLoader(NoisyDataset(), batch_size=4), 15)
    assert torch.equal(torch.random.get_rng_state(), before[0])
    assert random.getstate() == before[1]
    assert np.array_equal(np.random.get_state()[1], before[2])


def test_iterating_again_after_a_break_drops_what_workers_read_ahead() -> None:
    loader = spotrun.ResumableLoader(NoisyDataset(), batch_size=3, num_workers=2, prefetch_factor=4)
    whole_epoch = [b.clone() for b in spotrun.ResumableLoader(NoisyDataset(), batch_size=3)]
    taken = []
    for batch in loader:
        taken.append(batch.clone())
        if len(taken) == 2:
            break
    taken += [b.clone() for b in loader]
    assert_same_batches(taken, whole_epoch)
    assert (loader.epoch, loader.position) == (1, 0)


def test_persistent_workers_resume_exactly_too() -> None:
    make = lambda: spotrun.ResumableLoader(  # noqa: E731
        NoisyDataset(), batch_size=6, seed=9, num_workers=2, persistent_workers=True
    )
    assert_same_batches(*interrupted_and_resumed(make, batches_of, 9, 16))


def mask_some(samples: list[torch.Tensor]) -> torch.Tensor:
    """A masking collator's stand-in: each batch's mask drawn from the global torch RNG, as 🤗's
    DataCollatorForLanguageModeling draws it (torch.bernoulli) when it has no seed of its own."""
    batch = torch.stack(samples)
    return torch.cat([batch, torch.bernoulli(torch.full((len(batch), 1), 0.5)), torch.rand(len(batch), 1)], dim=1)


def masked_loader(workers: int) -> spotrun.ResumableLoader:
    return spotrun.ResumableLoader(NoisyDataset(), batch_size=5, seed=4, num_workers=workers, collate_fn=mask_some)


def fetched_ahead(loader: spotrun.ResumableLoader, count: int, torch_seed: int | None = None):
    """``count`` batches taken as Lightning takes them, the next one fetched before the loop's step on this one
    (which draws from the global RNG); with the loader's state as it was when the last one was fetched (Lightning
    keeps it with each batch) and the global RNG's after its step, as a checkpoint there keeps them."""
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    stream = loader.stream()
    taken, upcoming, upcoming_state = [], next(stream), loader.state_dict()
    for _ in range(count):
        batch, state = upcoming, upcoming_state
        upcoming, upcoming_state = next(stream), loader.state_dict()
        taken.append(batch.clone())
        torch.rand(3)  # the step's dropout
    return taken, state, torch.random.get_rng_state()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_collator_that_draws_masks_resumes_with_the_same_masks(workers: int) -> None:
    """Its draws came from the workers' RNGs (after a resume, other batches went to each worker) or, without
    workers, from the loop's stream, which had already drawn for the batch fetched ahead of the checkpoint."""
    uninterrupted, _, _ = fetched_ahead(masked_loader(workers), 14, torch_seed=0)
    head, state, rng = fetched_ahead(masked_loader(workers), 6, torch_seed=0)
    resumed = masked_loader(workers)
    resumed.load_state_dict(state)
    torch.random.set_rng_state(rng)
    tail, _, _ = fetched_ahead(resumed, 8)
    assert_same_batches(head + tail, uninterrupted)
    masks = torch.cat(uninterrupted)[:, 2]
    assert 0 < masks.sum() < len(masks)


def test_a_collation_draws_apart_from_its_fetch_and_leaves_the_global_rngs_where_they_were() -> None:
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    batches = batches_of(masked_loader(0), 9)
    assert torch.equal(torch.random.get_rng_state(), before)
    noise, drawn = torch.cat(batches)[:, 1], torch.cat(batches)[:, 3]
    assert len(torch.unique(drawn)) == len(drawn)
    assert not set(drawn.tolist()) & set((noise - noise.floor()).tolist())


def test_transformers_masking_collator_in_workers_resumes_with_the_same_masks() -> None:
    pytest.importorskip("transformers")
    from transformers import DataCollatorForLanguageModeling

    from .test_sdk_hf_trainer import _tokenizer

    examples = [{"input_ids": [3 + (i * 7 + j) % 20 for j in range(12)]} for i in range(24)]
    collator = DataCollatorForLanguageModeling(_tokenizer(), mlm=True)  # no seed: torch's global RNG
    make = lambda: spotrun.ResumableLoader(examples, batch_size=4, seed=5, num_workers=2, collate_fn=collator)  # noqa: E731
    labels = lambda loader, count: [batch["labels"] for batch in islice(loader.stream(), count)]  # noqa: E731
    resumed, uninterrupted = interrupted_and_resumed(make, labels, 4, 9)
    assert_same_batches(resumed, uninterrupted)
    assert any((batch != -100).any() for batch in uninterrupted)  # something was masked


def test_its_state_is_a_sampler_state_and_loads_into_a_sampler_of_the_same_configuration() -> None:
    loader = spotrun.ResumableLoader(NoisyDataset(), batch_size=5, seed=2)
    batches_of(loader, 3)
    sampler = spotrun.ResumableSampler(37, batch_size=5, seed=2)
    sampler.load_state_dict(loader.state_dict())
    assert (sampler.epoch, sampler.position) == (0, 15)
    other = spotrun.ResumableLoader(NoisyDataset(), batch_size=4, seed=2)
    with pytest.raises(ValueError, match="batch_size=5"):
        other.load_state_dict(loader.state_dict())
    assert (other.epoch, other.position) == (0, 0)


class WhatTheWorkerSaw(Dataset):
    """Items tell whether the worker fetching them ignores SIGTERM and which worker_init_fn marker it holds."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[bool, int]:
        return signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, WORKER_MARK


WORKER_MARK = 0


def _mark_worker(worker_id: int) -> None:
    global WORKER_MARK
    WORKER_MARK = 100 + worker_id


def test_workers_ignore_the_preemption_signals_and_a_user_worker_init_fn_still_runs() -> None:
    loader = spotrun.ResumableLoader(WhatTheWorkerSaw(), batch_size=4, num_workers=1, worker_init_fn=_mark_worker)
    (ignored, marks), = list(loader)
    assert ignored.tolist() == [True] * 4
    assert marks.tolist() == [100] * 4
    assert signal.getsignal(signal.SIGTERM) != signal.SIG_IGN  # the training process still hears it


class HeldWhenStarted(Dataset):
    """Items tell whether the worker fetching them still holds SIGTERM back (it must not, once it ignores it)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> bool:
        return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_workers_start_with_the_preemption_signals_held_until_they_ignore_them(monkeypatch) -> None:
    # PyTorch's worker kills itself on a SIGTERM from anyone but its parent until our worker_init_fn runs: a
    # preemption signal to the process group in that window killed a worker (seen in make test)
    from torch.utils.data import dataloader

    held_at_start = []
    start_workers = dataloader._MultiProcessingDataLoaderIter.__init__

    def recording(self, loader):
        held_at_start.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        start_workers(self, loader)

    monkeypatch.setattr(dataloader._MultiProcessingDataLoaderIter, "__init__", recording)
    loader = spotrun.ResumableLoader(HeldWhenStarted(), batch_size=4, num_workers=1)
    (held_in_worker,) = list(loader)
    assert held_at_start and {signal.SIGTERM, signal.SIGUSR1} <= held_at_start[0]
    assert held_in_worker.tolist() == [False] * 4
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the trainer hears it again


def test_a_preemption_signal_held_while_workers_start_reaches_the_trainer_after() -> None:
    heard = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: heard.append(signum))
    try:
        with spotrun.preemption_signals_held():
            signal.raise_signal(signal.SIGUSR1)
            assert heard == []
        assert heard == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


class Numbers(IterableDataset):
    def __iter__(self):
        return iter(range(5))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"sampler": None}, "sets sampler itself"),
        ({"shuffle": False, "batch_sampler": None}, "sets batch_sampler itself"),
        ({"generator": torch.Generator()}, "sets generator itself"),
        ({"in_order": False}, "in_order=True"),
    ],
)
def test_arguments_the_loader_owns_are_refused_by_name(arguments: dict, message: str) -> None:
    # shuffle is the loader's own keyword, so the DataLoader's is never seen: batch_sampler is the one named
    with pytest.raises((TypeError, ValueError), match=message):
        spotrun.ResumableLoader(NoisyDataset(), **arguments)


def test_an_iterable_dataset_is_refused() -> None:
    with pytest.raises(TypeError, match="map-style"):
        spotrun.ResumableLoader(Numbers())
