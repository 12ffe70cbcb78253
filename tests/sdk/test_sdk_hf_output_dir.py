"""TrainerCheckpoints checks at the start of training that every rank's output_dir is one folder: with several nodes
and an output_dir on each node's own disk, the first save failed ("lacks rng_state_1.pth"), after its steps were
trained (a helper running the HF example on two nodes lost 100 steps so). Two ranks are two threads here, exchanging
as torch.distributed's collectives do."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from spotrun.sdk.errors import CheckpointError  # noqa: E402
from spotrun.sdk.hf_trainer import check_one_output_dir  # noqa: E402


class ThreadRanks:
    """One rank of `world_size` threads: broadcast_from_first and exchange meet at a barrier, as collectives do."""

    def __init__(self, rank: int, world_size: int, shared: dict) -> None:
        self.rank, self.world_size, self._shared = rank, world_size, shared

    def _meet(self, value):
        slots = self._shared.setdefault("slots", [None] * self.world_size)
        slots[self.rank] = value
        self._shared["barrier"].wait()
        gathered = list(slots)
        self._shared["barrier"].wait()  # every rank has read before the next exchange writes
        return gathered

    def broadcast_from_first(self, value):
        return self._meet(value)[0]

    def exchange(self, value):
        return self._meet(value)


def run_ranks(folders: list[Path]) -> list[BaseException | None]:
    shared = {"barrier": threading.Barrier(len(folders))}
    outcomes: list[BaseException | None] = [None] * len(folders)

    def rank(number: int) -> None:
        try:
            check_one_output_dir(ThreadRanks(number, len(folders), shared), str(folders[number]))
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcomes[number] = error

    threads = [threading.Thread(target=rank, args=(number,)) for number in range(len(folders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return outcomes


def test_ranks_with_an_output_dir_each_are_refused_on_every_rank_before_training(tmp_path):
    outcomes = run_ranks([tmp_path / "node-0" / "out", tmp_path / "node-1" / "out"])
    assert all(isinstance(outcome, CheckpointError) for outcome in outcomes), outcomes
    assert "rank 1 does not see what rank 0 writes there" in str(outcomes[0])
    assert "must be one shared folder" in str(outcomes[1])
    assert list((tmp_path / "node-0" / "out").iterdir()) == []  # the probe is gone


def test_ranks_sharing_their_output_dir_go_on_and_leave_nothing_in_it(tmp_path):
    shared = tmp_path / "shared" / "out"
    assert run_ranks([shared, shared, shared]) == [None, None, None]
    assert list(shared.iterdir()) == []
