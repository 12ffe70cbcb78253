"""Agreement between the ranks of a torch.distributed job (and the trivial single-process case).

Two gloo groups of their own keep the SDK's collectives apart from the user's: one for the per-step
agreement in the training thread, one for the save protocol in the background writer thread (collectives
of one group must not interleave across threads).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class SingleProcess:
    rank = 0
    world_size = 1

    def agree_any(self, flags: list[bool]) -> list[bool]:
        return flags

    def barrier(self) -> None:
        pass

    def all_gather(self, value: Any) -> list[Any]:
        return [value]

    def broadcast_from_first(self, value: Any) -> Any:
        return value

    def exchange(self, value: Any) -> list[Any]:
        return [value]

    def leave(self) -> None:
        pass


class TorchDistributed:
    """Collectives over the default process group's ranks; must be created by every rank, in the same order."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._step_group = dist.new_group(backend="gloo")
        self._save_group = dist.new_group(backend="gloo")
        self._left = False

    def leave(self) -> None:
        """Destroy the SDK's groups while the interpreter is whole, before the process exits: gloo groups left to
        the interpreter's exit have aborted it (SIGABRT, "terminate called without an active exception") after the
        rank had saved, which the agent reads as a failed command, not "resume me". The user's groups stay theirs."""
        if self._left:
            return
        self._left = True
        for group in (self._step_group, self._save_group):
            dist.destroy_process_group(group)

    def agree_any(self, flags: list[bool]) -> list[bool]:
        """Each flag true on every rank when it is true on any (training thread)."""
        values = torch.tensor([int(flag) for flag in flags], dtype=torch.int64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self._step_group)
        return [bool(value) for value in values.tolist()]

    def broadcast_from_first(self, value: Any) -> Any:
        """Rank 0's value, on every rank (training thread)."""
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self._step_group)
        return box[0]

    def exchange(self, value: Any) -> list[Any]:
        """Every rank's value, indexed by rank (training thread)."""
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value, group=self._step_group)
        return gathered

    def barrier(self) -> None:
        """Wait for every rank (writer thread)."""
        dist.barrier(group=self._save_group)

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's value, indexed by rank (writer thread)."""
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value, group=self._save_group)
        return gathered


def current() -> SingleProcess | TorchDistributed:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return TorchDistributed()
    return SingleProcess()
