"""Two Checkpointers on one folder (a script started twice, an old attempt still saving while a new one starts):
the second writer is refused, clearly, and neither its saves nor its restore damage the first one's checkpoints."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import spotrun
from spotrun.sdk import CheckpointError, layout
from spotrun.sdk import storage, writerlock
from spotrun.sdk.writerlock import WriterLock

def make_state(fill: float) -> tuple[spotrun.TrainingState, torch.nn.Module]:
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(fill)
    return spotrun.torch_state(model=model), model


def restored(root: Path) -> tuple[int | None, torch.nn.Module]:
    state, model = make_state(0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a committed but damaged checkpoint would be skipped with a warning
        with spotrun.Checkpointer(root, signals=()) as ckpt:
            return ckpt.restore(state), model


def assert_every_committed_checkpoint_intact(root: Path) -> None:
    fs = spotrun.Checkpointer(root, signals=()).fs
    for _, path in layout.list_committed(fs, str(root)):
        layout.read_verified(fs, path)


def pause_after_first_file(ckpt: spotrun.Checkpointer, paused: threading.Event, resume: threading.Event) -> None:
    """Hold ``ckpt``'s save once its first payload file is written, until ``resume``."""
    write_payload = ckpt.store.write_payload

    def written_then_paused(staging: str, name: str, serialize: Callable[..., None]) -> dict[str, Any]:
        entry = write_payload(staging, name, serialize)
        if not paused.is_set():
            paused.set()
            assert resume.wait(30)
        return entry

    ckpt.store.write_payload = written_then_paused  # type: ignore[method-assign]


def in_thread(action: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:  # noqa: BLE001  (reported to the test)
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


@pytest.fixture
def refused_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A save refused the folder is refused at once, not after waiting CLAIM_WAIT_SECONDS for a holder that does not
    let go meanwhile (the wait itself: test_a_first_save_waits_out_a_restore_elsewhere_clearing_leftovers)."""
    monkeypatch.setattr(storage, "CLAIM_WAIT_SECONDS", 0.0)


def test_a_second_writer_saving_the_same_step_cannot_damage_the_committed_checkpoint(
    tmp_path: Path, refused_at_once: None
) -> None:
    first = spotrun.Checkpointer(tmp_path, signals=())
    second = spotrun.Checkpointer(tmp_path, signals=())
    second_paused, first_committed = threading.Event(), threading.Event()
    pause_after_first_file(second, second_paused, first_committed)
    commit = first.store.commit
    started: list[tuple[threading.Thread, list[BaseException]]] = []

    def commit_while_the_second_writes(staging: str, step: int, manifest: dict[str, Any]) -> None:
        # the second writer prepares the same step's staging folder and writes into it while the first commits
        started.append(in_thread(lambda: second.save(make_state(2.0)[0], 4)))
        deadline = time.monotonic() + 30
        while not second_paused.is_set() and started[0][0].is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        commit(staging, step, manifest)
        first_committed.set()

    first.store.commit = commit_while_the_second_writes  # type: ignore[method-assign]
    first.save(make_state(1.0)[0], 4)
    first.close()
    thread, errors = started[0]
    thread.join(30)
    second.close()

    assert errors and isinstance(errors[0], CheckpointError)  # the second writer's save failed, and said so
    assert_every_committed_checkpoint_intact(tmp_path)
    steps, model = restored(tmp_path)
    assert steps == 5 and torch.equal(model.weight, torch.full((3, 4), 1.0))


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path: Path, refused_at_once: None) -> None:
    with spotrun.Checkpointer(tmp_path, signals=()) as first:
        first.save(make_state(1.0)[0], 9)
        second = spotrun.Checkpointer(tmp_path, signals=(), keep_last=1)
        with pytest.raises(CheckpointError, match="another writer .* is saving checkpoints to this folder"):
            second.save(make_state(2.0)[0], 0)  # would also have pruned the first one's newer checkpoint
    assert restored(tmp_path)[0] == 10
    second.save(make_state(2.0)[0], 0)  # the first one has closed: the folder is free
    second.close()
    assert restored(tmp_path)[0] == 1


def test_a_first_save_waits_out_a_restore_elsewhere_clearing_leftovers(tmp_path: Path) -> None:
    """A restore (an evaluation reading the folder) holds the folder's lock while it clears leftovers: a writer's
    first save in that moment was refused, and its trainer crashed."""
    state = make_state(1.0)[0]
    with spotrun.Checkpointer(tmp_path, signals=()) as writer:
        clearing = WriterLock(str(tmp_path))
        assert clearing.acquire()
        threading.Timer(1.2, clearing.release).start()  # the first save claims the folder some 0.5 s in
        writer.save(state, 4)
    assert restored(tmp_path)[0] == 5


def test_a_writer_killed_with_sigkill_leaves_no_lock_behind(tmp_path: Path, refused_at_once: None) -> None:
    """Without a wait for the lock, the save after the SIGKILL finds the folder free the moment the holder is gone."""
    said, saying = os.pipe()
    holder = os.fork()  # a writer in another process: it saves, says so, then holds the folder until killed
    if holder == 0:
        try:
            os.close(said)
            ckpt = spotrun.Checkpointer(tmp_path, signals=())
            ckpt.save(make_state(1.0)[0], 0)
            os.write(saying, b"saved")
            time.sleep(120)
        finally:
            os._exit(1)
    os.close(saying)
    alive = True
    try:
        assert os.read(said, 5) == b"saved", "the holder ended before it had saved"
        with spotrun.Checkpointer(tmp_path, signals=()) as second:
            with pytest.raises(CheckpointError, match="is saving checkpoints to this folder"):
                second.save(make_state(2.0)[0], 4)
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)
        alive = False
        with spotrun.Checkpointer(tmp_path, signals=()) as second:
            second.save(make_state(2.0)[0], 4)
    finally:
        os.close(said)
        if alive:
            os.kill(holder, signal.SIGKILL)
            os.waitpid(holder, 0)
    steps, model = restored(tmp_path)
    assert steps == 5 and torch.equal(model.weight, torch.full((3, 4), 2.0))


def test_a_restore_does_not_remove_another_writers_save_in_flight(tmp_path: Path) -> None:
    first = spotrun.Checkpointer(tmp_path, signals=())
    first.save(make_state(1.0)[0], 0)
    paused, resume = threading.Event(), threading.Event()
    pause_after_first_file(first, paused, resume)
    first.save(make_state(2.0)[0], 1, wait=False)
    assert paused.wait(30)
    try:
        with spotrun.Checkpointer(tmp_path, signals=()) as reader:  # e.g. a new attempt started too early
            assert reader.restore(make_state(0.0)[0]) == 1
    finally:
        resume.set()
    first.close()  # raises CheckpointError if the restore removed its staging folder
    steps, model = restored(tmp_path)
    assert steps == 2 and torch.equal(model.weight, torch.full((3, 4), 2.0))


def test_a_forked_child_does_not_keep_the_folder_locked(tmp_path: Path) -> None:
    first = spotrun.Checkpointer(tmp_path, signals=())
    first.save(make_state(1.0)[0], 0)
    child = os.fork()  # a DataLoader worker, say, which may outlive its parent for a while
    if child == 0:
        time.sleep(60)
        os._exit(0)
    try:
        first.close()
        with spotrun.Checkpointer(tmp_path, signals=()) as second:
            second.save(make_state(2.0)[0], 1)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert restored(tmp_path)[0] == 2


@pytest.mark.parametrize("fork_at", ["before the flock", "after the flock"])
def test_a_child_forked_while_the_lock_is_being_taken_does_not_keep_the_folder_locked(
    fork_at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread (a DataLoader starting its workers) forked between the folder's open and the lock's record: the
    child's copy of the descriptor, not closed at the fork, kept the folder locked after the parent released it."""
    children: list[int] = []
    release_child, child_end = os.pipe()
    child_started, started = os.pipe()
    flock = writerlock.fcntl.flock

    def fork_in_the_window(fd: int, operation: int) -> None:
        if fork_at == "after the flock":
            flock(fd, operation)
        if not children:
            pid = os.fork()
            if pid == 0:  # the child, its at-fork handlers run: holds on to what it inherited until the test is done
                os.write(started, b"x")
                os.read(release_child, 1)
                os._exit(0)
            children.append(pid)
        if fork_at == "before the flock":
            flock(fd, operation)

    monkeypatch.setattr(writerlock.fcntl, "flock", fork_in_the_window)
    try:
        lock = WriterLock(str(tmp_path))
        assert lock.acquire() and children
        lock.release()
        os.read(child_started, 1)
        second = WriterLock(str(tmp_path))
        assert second.acquire(), "the forked child holds the folder's lock"
        second.release()
    finally:
        os.write(child_end, b"x")
        for pid in children:
            os.waitpid(pid, 0)
        for fd in (release_child, child_end, child_started, started):
            os.close(fd)


TWO_RANKS = Path(__file__).with_name("sdk_two_writers_worker.py")


def test_the_other_ranks_of_a_writer_refused_the_folder_write_nothing_into_it(tmp_path: Path) -> None:
    """Two 2-rank jobs on one folder: the second's rank 0 was refused, but its rank 1 wrote its file all the same,
    into the first job's staging folder of the same step, over the first job's rank 1 file that the first then
    committed: a checkpoint damaged, skipped at every restore."""
    done = subprocess.run([sys.executable, str(TWO_RANKS), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        assert json.loads((tmp_path / f"first-{rank}.json").read_text())["outcome"] == "saved"
        assert "is saving checkpoints to this folder" in json.loads((tmp_path / f"second-{rank}.json").read_text())["outcome"]
    assert_every_committed_checkpoint_intact(tmp_path / "ckpt")


def test_a_folder_that_cannot_be_locked_is_warned_of_once_per_process(tmp_path: Path, monkeypatch, caplog) -> None:
    """NFS-like: flock fails with ENOLCK. The warning came at every restore and every save's claim."""
    def cannot_lock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(writerlock.fcntl, "flock", cannot_lock)
    monkeypatch.setattr(writerlock, "_warned", set())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    caplog.set_level(logging.WARNING, logger=writerlock.__name__)
    for root in ("a", "a", "b", "a"):
        lock = WriterLock(str(tmp_path / root))
        assert lock.acquire()  # counts as taken
        lock.release()
    warned = [record.getMessage() for record in caplog.records if "cannot be locked" in record.getMessage()]
    assert warned == [f"{tmp_path / root} cannot be locked ([Errno {errno.ENOLCK}] No locks available): a second "
                      "writer here would go unnoticed" for root in ("a", "b")]
