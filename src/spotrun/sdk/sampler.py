"""A sampler whose position is part of the checkpoint, so a resumed run continues mid-epoch.

The order of epoch ``e`` depends only on ``(seed, e)``; the saved position is the number of samples this
rank has handed out in the current epoch. A position saved by another number of ranks is taken over: the ranks
had handed out the head of the epoch's order between them, and the new ones share out its rest (the epoch's
remaining samples, each once; not the batches an uninterrupted run with the old number would have made).
The position counts what the sampler has *yielded*, so iterate it directly. To load through a DataLoader
(workers included) use ``ResumableLoader``, which saves the position the training loop has received: a
DataLoader reads its sampler ahead, and a plain one also shifts the global RNG each time it starts (see
``loader``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

_CONFIG_FIELDS = ("dataset_len", "batch_size", "shuffle", "seed", "drop_last", "world_size", "rank")


class ResumableSampler(Sampler):
    """Indices (or, with ``batch_size``, lists of indices) of a dataset, epoch after epoch, resumable.

    Iterating yields the rest of the current epoch and then moves to the next epoch; ``stream()`` goes on
    across epochs for loops driven by a step counter. With ``world_size > 1`` each rank gets every
    ``world_size``-th index of the epoch's order (padded with its head so that all ranks get as many). A checkpoint
    of another ``world_size`` resumes with the rest of its epoch shared out among this one's ranks.
    Index tensors with what it yields directly; behind a plain ``DataLoader(ds, batch_sampler=s)`` a resume is not
    exact (each new iterator draws from the global torch RNG, and workers read ahead): load through
    ``ResumableLoader`` instead.
    """

    def __init__(
        self,
        dataset_len: int,
        *,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        if dataset_len < 1:
            raise ValueError(f"dataset_len must be at least 1, got {dataset_len}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
        super().__init__()
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.world_size = world_size
        self.rank = rank
        self.epoch = 0
        self.position = 0
        self._taken_over: tuple[int, int] | None = None  # (epoch, samples of it other ranks had handed out)
        if self.samples_in(0) == 0:
            raise ValueError(
                f"batch_size={self.batch_size} with drop_last leaves no batch of "
                f"{-(-self.dataset_len // self.world_size)} samples per rank"
            )

    def _share(self, samples: int, world_size: int) -> int:
        """Indices each of ``world_size`` ranks gets of ``samples``."""
        per_rank = -(-samples // world_size)
        if self.batch_size is not None and self.drop_last:
            per_rank -= per_rank % self.batch_size
        return per_rank

    def start_of(self, epoch: int) -> int:
        """Where in ``epoch``'s order these ranks started: 0, except in the epoch taken over from a checkpoint of
        another number of ranks (the samples those had handed out)."""
        return self._taken_over[1] if self._taken_over is not None and self._taken_over[0] == epoch else 0

    def samples_in(self, epoch: int) -> int:
        """Indices this rank gets in ``epoch``."""
        return self._share(self.dataset_len - self.start_of(epoch), self.world_size)

    @property
    def samples_per_epoch(self) -> int:
        """Indices this rank gets in the current epoch."""
        return self.samples_in(self.epoch)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """This rank's indices for ``epoch`` (a function of seed, epoch, rank and world size, and of where these
        ranks started in it)."""
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.dataset_len)
        else:
            order = np.arange(self.dataset_len)
        rest = order[self.start_of(epoch) :]
        padded = -(-len(rest) // self.world_size) * self.world_size
        rest = np.resize(rest, padded)  # repeats the head to pad
        return rest[self.rank :: self.world_size][: self.samples_in(epoch)]

    def __len__(self) -> int:
        """Items in the current epoch: samples, or batches when ``batch_size`` is set."""
        return self.items_in(self.epoch)

    def items_in(self, epoch: int) -> int:
        """Items this rank gets in ``epoch``: samples, or batches when ``batch_size`` is set."""
        samples = self.samples_in(epoch)
        return samples if self.batch_size is None else -(-samples // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        order = self.epoch_order(self.epoch)
        step = self.batch_size or 1
        while self.position < len(order):
            chunk = order[self.position : self.position + step]
            self.position += len(chunk)
            yield chunk.tolist() if self.batch_size is not None else int(chunk[0])
        self.epoch += 1
        self.position = 0

    def stream(self) -> Iterator[Any]:
        """Items from the current position on, across epochs, without end (read ``epoch`` to know where)."""
        while True:
            yield from self

    def state_dict(self) -> dict[str, Any]:
        return self.state_at(self.epoch, self.position)

    def state_at(self, epoch: int, position: int) -> dict[str, Any]:
        """The state of this sampler at ``position`` in ``epoch``."""
        config = {field: getattr(self, field) for field in _CONFIG_FIELDS}
        return {"epoch": epoch, "position": position, "start": self.start_of(epoch), **config}

    def state_dict_mismatches(self, state: Any) -> list[str]:
        """Why ``state`` cannot be loaded here: another configuration (the rank and the number of ranks may
        differ), or no position."""
        if not isinstance(state, dict) or not all(isinstance(state.get(key), int) for key in ("epoch", "position")):
            return ["the checkpoint holds no sampler position"]
        if not isinstance(state.get("world_size"), int) or state["world_size"] < 1:
            return ["the checkpoint's sampler state has no world_size"]
        return [
            f"the checkpoint was made with {field}={state.get(field)!r}, this sampler has {field}={getattr(self, field)!r}"
            for field in _CONFIG_FIELDS
            if field not in ("rank", "world_size") and state.get(field) != getattr(self, field)
        ]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        problems = self.state_dict_mismatches(state)
        if problems:
            raise ValueError(f"sampler mismatch: {'; '.join(problems)}")
        epoch, position, start = int(state["epoch"]), int(state["position"]), int(state.get("start", 0))
        self._taken_over = (epoch, start) if start else None
        if state["world_size"] == self.world_size:
            self.epoch, self.position = epoch, position
            return
        handed_out = start + position * state["world_size"]  # the saving ranks' positions were all alike
        if position >= self._share(self.dataset_len - start, state["world_size"]) or handed_out >= self.dataset_len:
            self.epoch, self.position, self._taken_over = epoch + 1, 0, None  # that epoch was over
            return
        self.epoch, self.position, self._taken_over = epoch, 0, (epoch, handed_out)
        if self.samples_in(epoch) == 0:  # drop_last: too few left for a batch on each rank
            self.epoch, self.position, self._taken_over = epoch + 1, 0, None
