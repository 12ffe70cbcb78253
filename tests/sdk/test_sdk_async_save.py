"""Saves run in the background: the training thread only snapshots; at most one save is in flight; a
failed save surfaces on the next call; interpreter exit flushes the save in flight."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from fsspec.implementations.memory import MemoryFileSystem

import spotrun
from spotrun.sdk import CheckpointError, layout

DEADLOCK_GUARD_SECONDS = 30  # only reached if a call blocks on the gated storage, i.e. the test fails


class GatedFileSystem(MemoryFileSystem):
    """In-memory object storage whose writes wait until the test opens the gate."""

    protocol = "gatedmem"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.writing = threading.Event()
        self.writes = 0

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        self.writing.set()
        assert self.gate.wait(DEADLOCK_GUARD_SECONDS), "the test never opened the gate"
        self.writes += 1
        super().pipe_file(path, value, *args, **kwargs)


class FailingFileSystem(MemoryFileSystem):
    protocol = "failingmem"

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk on fire")


def _in_thread(action: Any) -> None:
    worker = threading.Thread(target=action)
    worker.start()
    worker.join(DEADLOCK_GUARD_SECONDS)
    assert not worker.is_alive(), "the call blocked on the storage"


def test_step_returns_while_the_save_is_still_being_written() -> None:
    fs = GatedFileSystem(skip_instance_cache=True)
    model = torch.nn.Linear(3, 3)
    state = spotrun.torch_state(model=model)
    saved_weight = model.weight.detach().clone()
    ckpt = spotrun.Checkpointer(f"/{uuid.uuid4().hex}", fs=fs, every_steps=1, signals=())

    _in_thread(lambda: ckpt.step(state, 0))
    assert fs.writing.wait(DEADLOCK_GUARD_SECONDS)  # the writer thread is inside the storage...
    assert ckpt.store.committed() == []  # ...and nothing is committed yet
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on: the snapshot must not see this
    for step in range(1, 5):  # more due saves while one is in flight: deferred, not queued
        _in_thread(lambda step=step: ckpt.step(state, step))

    fs.gate.set()
    ckpt.wait()
    assert [steps for steps, _ in ckpt.store.committed()] == [1]
    writes_per_save = fs.writes
    ckpt.step(state, 5)  # the deferred save happens at the first step after the one in flight
    ckpt.wait()
    assert [steps for steps, _ in ckpt.store.committed()] == [1, 6]
    assert fs.writes == 2 * writes_per_save

    fresh = torch.nn.Linear(3, 3)
    ckpt.store.remove(ckpt.store.path(6))
    assert ckpt.restore(spotrun.torch_state(model=fresh)) == 1
    assert torch.equal(fresh.weight, saved_weight)
    ckpt.close()


def test_failed_background_save_raises_on_next_call() -> None:
    state = spotrun.torch_state(model=torch.nn.Linear(2, 2))
    ckpt = spotrun.Checkpointer("/failing", fs=FailingFileSystem(skip_instance_cache=True), every_steps=1, signals=())
    ckpt.step(state, 0)
    with pytest.raises(CheckpointError, match="disk on fire"):
        ckpt.wait()
    ckpt.step(state, 1)
    with pytest.raises(CheckpointError, match="not committed"):
        ckpt.wait()
    with pytest.raises(CheckpointError):
        ckpt.save(state, 3)
    assert layout.list_committed(ckpt.fs, ckpt.root) == []


def test_interpreter_exit_flushes_the_save_in_flight(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import time, torch, spotrun
        from fsspec.implementations.local import LocalFileSystem

        class SlowDisk(LocalFileSystem):
            def open(self, *args, **kwargs):
                time.sleep(0.5)
                return super().open(*args, **kwargs)

        ckpt = spotrun.Checkpointer({str(tmp_path)!r}, fs=SlowDisk(skip_instance_cache=True), every_steps=1)
        ckpt.step(spotrun.torch_state(model=torch.nn.Linear(2, 2)), 0)
        print("step returned", ckpt.store.committed(), flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "step returned []" in done.stdout  # the process reached its end before the commit
    assert [steps for steps, _ in layout.list_committed(spotrun.Checkpointer(tmp_path, signals=()).fs, str(tmp_path))] == [1]
