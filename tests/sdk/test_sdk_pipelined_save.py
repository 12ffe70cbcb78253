"""A save's writer starts on each storage as soon as the snapshot copy of it is done, while the training thread is
still copying the rest; it never reads a storage before its copy, and a copy that fails fails the save."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import spotrun
from spotrun.sdk import CheckpointError, directio, snapshot


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(700, 700) for _ in range(3)))  # 2 MB weights: page-aligned copies
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model[0].weight.data.add_(1.0)  # every value changes, so a stale copy cannot go unnoticed
    model(torch.randn(2, 700)).sum().backward()
    optimizer.step()


def restored_weights(root: Path) -> dict[str, torch.Tensor]:
    model, optimizer = model_and_optimizer()
    with spotrun.Checkpointer(root, signals=()) as ckpt:
        ckpt.restore(spotrun.torch_state(model=model, optimizer=optimizer))
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def test_the_writer_starts_before_the_copy_ends_and_writes_only_copied_storages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, optimizer = model_and_optimizer()
    train_step(model, optimizer)
    events: list[tuple[str, float]] = []
    copy_all, write_at = snapshot.SnapshotCopies._copy_all, directio.DirectWriter._write_at

    def slow_copy_all(self: snapshot.SnapshotCopies, moves: list[tuple[int, int, int, int]]) -> None:
        for move in moves:
            time.sleep(0.02)
            copy_all(self, [move])

    def recorded_write_at(self: directio.DirectWriter, chunk: memoryview, offset: int) -> None:
        events.append(("write", time.perf_counter()))
        write_at(self, chunk, offset)

    with spotrun.Checkpointer(tmp_path, signals=(), keep_last=None) as ckpt:
        state = spotrun.torch_state(model=model, optimizer=optimizer)
        ckpt.save(state, 0)  # the first save allocates the snapshot; the second copies into it
        train_step(model, optimizer)
        expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        monkeypatch.setattr(snapshot.SnapshotCopies, "_copy_all", slow_copy_all)
        monkeypatch.setattr(directio.DirectWriter, "_write_at", recorded_write_at)
        ckpt.save(state, 1, wait=False)
        copied = time.perf_counter()
        train_step(model, optimizer)  # training goes on and changes the live tensors while the writer writes
        ckpt.wait()
    if not events:
        pytest.skip("no O_DIRECT writes on this filesystem")
    assert events[0][1] < copied  # the disk writes overlapped the copy
    restored = restored_weights(tmp_path)
    assert all(torch.equal(restored[name], expected[name]) for name in expected)


def test_a_writer_that_asks_before_the_copy_has_started_waits_for_it() -> None:
    live = {"w": torch.randn(600, 1000)}
    earlier = snapshot.snapshot_to_host(live)
    live["w"].add_(1.0)
    copies = snapshot.SnapshotCopies()
    planned = copies.snapshot(live, earlier)  # the Checkpointer hands this to its writer before it runs the copies
    answered = threading.Event()
    writer = threading.Thread(target=lambda: (copies.wait_for(planned["w"].untyped_storage()), answered.set()))
    writer.start()
    assert not answered.wait(0.2)  # the copy is listed but not made: the writer must not read the storage yet
    copies.run()
    writer.join(timeout=5)
    assert answered.is_set() and torch.equal(planned["w"], live["w"])


def test_a_copy_that_fails_fails_the_save_and_commits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, optimizer = model_and_optimizer()
    with spotrun.Checkpointer(tmp_path, signals=(), keep_last=None) as ckpt:
        state = spotrun.torch_state(model=model, optimizer=optimizer)
        ckpt.save(state, 0)
        saved = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        train_step(model, optimizer)

        def failing(self: snapshot.SnapshotCopies, moves: list[Any]) -> None:
            raise MemoryError("copy failed")

        monkeypatch.setattr(snapshot.SnapshotCopies, "_copy_all", failing)
        with pytest.raises(MemoryError):
            ckpt.save(state, 1)
        with pytest.raises(CheckpointError, match="snapshot copy failed"):
            ckpt.wait()
        monkeypatch.undo()
    assert [path.name for path in tmp_path.glob("ckpt-*")] == ["ckpt-000000000001"]
    restored = restored_weights(tmp_path)
    assert all(torch.equal(restored[name], saved[name]) for name in saved)
