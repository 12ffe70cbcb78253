"""A sampler whose position is part of the checkpoint, so a resumed run continues mid-epoch.

The order of epoch ``e`` depends only on ``(seed, e)``; the saved position is the number of samples this
rank has handed out in the current epoch. The position counts what the sampler has *yielded*, so iterate it
directly. To load through a DataLoader (workers included) use ``ResumableLoader``, which saves the position
the training loop has received: a DataLoader reads its sampler ahead, and a plain one also shifts the global
RNG each time it starts (see ``loader``).
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
    ``world_size``-th index of the epoch's order (padded with its head so that all ranks get as many).
    Use as ``DataLoader(ds, sampler=s)``, ``DataLoader(ds, batch_sampler=s)`` (with ``batch_size``), or
    index tensors directly.
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
        self._samples_per_rank = self._rank_share()

    def _rank_share(self) -> int:
        per_rank = -(-self.dataset_len // self.world_size)
        if self.batch_size is not None and self.drop_last:
            per_rank -= per_rank % self.batch_size
            if per_rank == 0:
                raise ValueError(
                    f"batch_size={self.batch_size} with drop_last leaves no batch of "
                    f"{-(-self.dataset_len // self.world_size)} samples per rank"
                )
        return per_rank

    @property
    def samples_per_epoch(self) -> int:
        """Indices this rank gets in one epoch."""
        return self._samples_per_rank

    def epoch_order(self, epoch: int) -> np.ndarray:
        """This rank's indices for ``epoch`` (a function of seed, epoch, rank and world size only)."""
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.dataset_len)
        else:
            order = np.arange(self.dataset_len)
        padded = -(-self.dataset_len // self.world_size) * self.world_size
        order = np.resize(order, padded)  # repeats the head to pad
        return order[self.rank :: self.world_size][: self._samples_per_rank]

    def __len__(self) -> int:
        """Items in one full epoch: samples, or batches when ``batch_size`` is set."""
        if self.batch_size is None:
            return self._samples_per_rank
        return -(-self._samples_per_rank // self.batch_size)

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
        return {"epoch": self.epoch, "position": self.position, **{f: getattr(self, f) for f in _CONFIG_FIELDS}}

    def state_dict_mismatches(self, state: Any) -> list[str]:
        """Why ``state`` cannot be loaded here: another configuration (the rank may differ), or no position."""
        if not isinstance(state, dict) or not all(isinstance(state.get(key), int) for key in ("epoch", "position")):
            return ["the checkpoint holds no sampler position"]
        return [
            f"the checkpoint was made with {field}={state.get(field)!r}, this sampler has {field}={getattr(self, field)!r}"
            for field in _CONFIG_FIELDS
            if field != "rank" and state.get(field) != getattr(self, field)
        ]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        problems = self.state_dict_mismatches(state)
        if problems:
            raise ValueError(f"sampler mismatch: {'; '.join(problems)}")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
