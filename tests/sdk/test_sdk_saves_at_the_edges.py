"""Saves at the edges: a notice while a save fails, a kill mid-replace, 13-digit and negative steps, an empty DTensor,
folders named like globs, a manifest read that fails once, and the save in flight as the interpreter exits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import spotrun
from spotrun.sdk import storage
from spotrun.sdk.preemption import PreemptionFlag


def _model_state() -> tuple[torch.nn.Linear, spotrun.TrainingState]:
    model = torch.nn.Linear(2, 2)
    return model, spotrun.torch_state(model=model)


def test_a_notice_while_a_failing_background_save_is_in_flight_still_saves_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk was full for a moment (or the store answered 503 once) during a periodic save; the preemption notice
    arrives while it is failing. The stop must still be saved: raising the old failure instead loses every step since
    the last periodic checkpoint, although the final save would have worked."""
    flag = PreemptionFlag()
    model, state = _model_state()
    ckpt = spotrun.Checkpointer(tmp_path, every_steps=5, signals=(), flag=flag)
    gate = threading.Event()
    real = storage.LocalStore.write_payload

    def write_payload(self, staging, name, serialize):  # type: ignore[no-untyped-def]
        if staging.endswith("ckpt-000000000010"):  # the disk is full for this save only
            assert gate.wait(30)
            raise OSError(28, "No space left on device")
        return real(self, staging, name, serialize)

    monkeypatch.setattr(storage.LocalStore, "write_payload", write_payload)
    for step in range(5):
        ckpt.step(state, step)
    ckpt.wait()  # the checkpoint of 5 steps is committed
    for step in range(5, 10):  # the periodic save of 10 steps is in flight (held at the gate), and fails
        ckpt.step(state, step)
    assert not ckpt._inflight.done()
    flag.request()
    gate.set()
    with torch.no_grad():
        model.weight.fill_(3.0)
    ckpt.step(state, 10)
    assert ckpt.should_stop
    ckpt.close()
    fresh, fresh_state = _model_state()
    assert spotrun.Checkpointer(tmp_path, signals=()).restore(fresh_state) == 11
    assert torch.equal(fresh.weight, torch.full((2, 2), 3.0))


def test_a_save_killed_while_replacing_a_checkpoint_of_the_same_step_loses_neither(tmp_path: Path) -> None:
    """LocalStore.commit moves the old ckpt-N aside, then renames the new one into place. Killed between the two
    renames, the next restore deleted both (staging and trash) and went back to an older checkpoint."""
    script = textwrap.dedent(
        f"""
        import os, signal, torch, spotrun
        from spotrun.sdk import storage
        root = {str(tmp_path)!r}
        model = torch.nn.Linear(2, 2)
        torch.nn.init.constant_(model.weight, 5.0)
        ckpt = spotrun.Checkpointer(root, signals=(), keep_last=None)
        real_rename, real_exchange = os.rename, getattr(storage, "_exchange", None)
        def rename(source, target):  # the old ckpt-2 moved aside: the instance is gone, right here
            real_rename(source, target)
            if os.path.basename(target).startswith(".trash-ckpt-000000000002"):
                os.kill(os.getpid(), signal.SIGKILL)
        def exchange(first, second):  # or right after the swap, where the store makes one
            swapped = real_exchange(first, second)
            if swapped:
                os.kill(os.getpid(), signal.SIGKILL)
            return swapped
        os.rename = rename
        if real_exchange is not None:
            storage._exchange = exchange
        ckpt.save(spotrun.torch_state(model=model), 1)
        """
    )
    with spotrun.Checkpointer(tmp_path, signals=(), keep_last=None) as ckpt:
        state = _model_state()[1]
        ckpt.save(state, 0)
        ckpt.save(state, 1)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    model, state = _model_state()
    assert spotrun.Checkpointer(tmp_path, signals=()).restore(state) == 2
    assert torch.equal(model.weight, torch.full((2, 2), 5.0))  # the new one: it was complete


def test_a_step_count_of_13_digits_is_restored(tmp_path: Path) -> None:
    """ckpt-<step:012d> makes 13 digits from 10**12 on, which parse_step did not read back: the save reported
    success and restore started the run over."""
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(_model_state()[1], 10**12 - 1)
    assert spotrun.Checkpointer(tmp_path, signals=()).restore(_model_state()[1]) == 10**12


@pytest.mark.parametrize("step", [-2, -100])
def test_a_negative_step_is_refused_not_saved_where_restore_never_looks(tmp_path: Path, step: int) -> None:
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        with pytest.raises(ValueError, match="step"):
            ckpt.save(_model_state()[1], step)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("ckpt-")]


@pytest.fixture
def one_rank_mesh():  # type: ignore[no-untyped-def]
    import socket

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("with_other_dtensor", [True, False])
def test_an_empty_dtensor_in_the_state_does_not_make_every_checkpoint_unreadable(
    tmp_path: Path, one_rank_mesh, with_other_dtensor: bool  # type: ignore[no-untyped-def]
) -> None:
    """A DTensor with no elements has no piece to save, so shards.idx lists none (or, alone, there is no shards.idx):
    restore took every checkpoint for corrupt and raised NoValidCheckpoint, though each save had reported success."""
    from torch.distributed.tensor import Shard, distribute_tensor

    def values() -> dict[str, torch.Tensor]:
        made = {"empty": distribute_tensor(torch.empty(0, 4), one_rank_mesh, [Shard(0)])}
        if with_other_dtensor:
            made["weight"] = distribute_tensor(torch.arange(8.0).reshape(2, 4), one_rank_mesh, [Shard(0)])
        return made

    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(extras=values(), rng=False), 0)
    restored = values()
    if with_other_dtensor:
        with torch.no_grad():
            restored["weight"].zero_()
    assert spotrun.Checkpointer(tmp_path, signals=()).restore(spotrun.torch_state(extras=restored, rng=False)) == 1
    assert tuple(restored["empty"].shape) == (0, 4)
    if with_other_dtensor:
        assert torch.equal(restored["weight"].full_tensor(), torch.arange(8.0).reshape(2, 4))


@pytest.mark.parametrize("name", ["exp[1]", "exp?", "exp*"])
def test_pruning_in_an_object_store_folder_named_like_a_glob_deletes_no_other_runs_checkpoints(name: str) -> None:
    """fsspec's rm expands glob characters ([ ] * ?): keep_last's removal of runs/exp[1]/ckpt-1 deleted
    runs/exp1/ckpt-1, another run's checkpoint, and left its own."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs = MemoryFileSystem(skip_instance_cache=True)
    state = _model_state()[1]
    with spotrun.Checkpointer("memory://runs/exp1", fs=fs, signals=(), keep_last=None) as other:
        for step in range(3):
            other.save(state, step)
    with spotrun.Checkpointer(f"memory://runs/{name}", fs=fs, signals=(), keep_last=1) as mine:
        for step in range(3):
            mine.save(state, step)
    assert [steps for steps, _ in other.store.committed()] == [1, 2, 3]
    assert [steps for steps, _ in mine.store.committed()] == [3]
    assert [steps for steps, _ in mine.store.checkpoint_folders()] == [3]


def test_a_manifest_read_that_fails_once_in_the_io_is_tried_again_not_taken_for_no_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restore retries a read that failed in the I/O (a newer checkpoint skipped is removed by the next save's
    pruning), but read_manifest turned an OSError (a connection reset, S3's 503) into "no readable manifest", which is
    not retried: one such error skipped the newest checkpoint, and the next save deleted it."""
    from fsspec.implementations.memory import MemoryFileSystem

    from spotrun.sdk import checkpointer as checkpointer_module
    from spotrun.sdk import layout

    monkeypatch.setattr(checkpointer_module, "READ_RETRY_PAUSE_SECONDS", 0.0)

    class FlakyStore(MemoryFileSystem):
        protocol = "flakymem"
        failures = 0

        def _open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
            if FlakyStore.failures and mode == "rb" and path.endswith(f"{layout.checkpoint_name(2)}/{layout.MANIFEST_NAME}"):
                FlakyStore.failures -= 1
                raise ConnectionResetError(104, "Connection reset by peer")
            return super()._open(path, mode, **kwargs)

    fs = FlakyStore(skip_instance_cache=True)
    state = _model_state()[1]
    with spotrun.Checkpointer("flakymem://run", fs=fs, signals=(), keep_last=2) as ckpt:
        ckpt.save(state, 0)
        ckpt.save(state, 1)
    FlakyStore.failures = 1
    with spotrun.Checkpointer("flakymem://run", fs=fs, signals=(), keep_last=2) as resumed:
        assert resumed.restore(_model_state()[1]) == 2


@pytest.mark.parametrize("location", ["local", "object store"])
def test_interpreter_exit_flushes_a_save_in_flight_of_a_model_with_a_tensor_of_a_mebibyte(
    tmp_path: Path, location: str
) -> None:
    """The module promises that the interpreter's exit flushes the save in flight (its writer thread is joined). But
    writing a chunk of 1 MiB or more hands its hashing (and, in an object store, its part uploads) to a fresh
    ThreadPoolExecutor, and once the interpreter has begun to exit no ThreadPoolExecutor accepts work ("cannot
    schedule new futures after interpreter shutdown"): the last save of any real model failed at the script's end.
    (test_interpreter_exit_flushes_the_save_in_flight passes with Linear(2, 2), whose chunks are hashed inline.)"""
    if location == "local":
        opening = f"ckpt = spotrun.Checkpointer({str(tmp_path)!r}, every_steps=1)"
    else:
        opening = textwrap.dedent(
            f"""
            from fsspec.implementations.local import LocalFileSystem
            from fsspec.implementations.memory import MemoryFileSystem
            class Bucket(MemoryFileSystem):  # an object store that keeps its objects on the disk, for the test to read
                protocol = "diskbucket"
                def pipe_file(self, path, value, *args, **kwargs):
                    LocalFileSystem(auto_mkdir=True).pipe_file({str(tmp_path)!r} + "/" + path.split("://")[-1].lstrip("/"), value)
                def _open(self, path, mode="rb", **kwargs):
                    return LocalFileSystem(auto_mkdir=True).open({str(tmp_path)!r} + "/" + path.split("://")[-1].lstrip("/"), mode)
                def ls(self, path, detail=False, **kwargs):
                    return []
                def exists(self, path, **kwargs):
                    return False
            ckpt = spotrun.Checkpointer("diskbucket:///run", fs=Bucket(skip_instance_cache=True), every_steps=1)
            """
        )
    script = "import torch, spotrun\n" + opening + textwrap.dedent(
        """
        ckpt.step(spotrun.torch_state(model=torch.nn.Linear(1024, 1024)), 0)  # a 4 MiB weight
        print("step returned", flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "step returned" in done.stdout
    assert "not committed" not in done.stderr, done.stderr[-2000:]
    root = tmp_path if location == "local" else tmp_path / "run"
    assert (root / "ckpt-000000000001" / "manifest.json").is_file(), done.stderr[-2000:]


def test_a_notice_between_micro_batches_while_a_background_save_fails_still_saves_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notice seen between micro-batches while the periodic save in flight failed: step() raised that failure,
    and the stop it was to hold was never saved."""
    flag = PreemptionFlag()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = spotrun.torch_state(model=model, optimizer=opt)
    ckpt = spotrun.Checkpointer(tmp_path, every_steps=5, signals=(), flag=flag)
    gate = threading.Event()
    real = storage.LocalStore.write_payload

    def write_payload(self, staging, name, serialize):  # type: ignore[no-untyped-def]
        if staging.endswith("ckpt-000000000010"):
            assert gate.wait(30)
            raise OSError(28, "No space left on device")
        return real(self, staging, name, serialize)

    monkeypatch.setattr(storage.LocalStore, "write_payload", write_payload)

    def micro_batch() -> None:
        model(torch.ones(1, 2)).sum().backward()

    def optimizer_step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    for step in range(5):
        micro_batch()
        optimizer_step()
        ckpt.step(state, step)
    ckpt.wait()  # the checkpoint of 5 steps is committed
    for step in range(5, 10):  # the periodic save of 10 steps is in flight, held at the gate, and fails
        micro_batch()
        optimizer_step()
        ckpt.step(state, step)
    assert not ckpt._inflight.done()
    flag.request()
    gate.set()
    micro_batch()  # step 10's first micro-batch: gradients pending, the notice seen here
    outcome = "returned"
    try:
        ckpt.step(state, 10)
    except Exception as error:  # noqa: BLE001
        outcome = f"raised {error!r}"
    optimizer_step()
    ckpt.step(state, 10)
    assert outcome == "returned", f"step() between micro-batches {outcome}: the stop it held is lost"
    assert ckpt.should_stop


def test_pruning_keeps_a_checkpoint_asked_to_be_kept_besides_the_newest(tmp_path: Path) -> None:
    """The Trainer's best checkpoint (load_best_model_at_end) was pruned by keep_last like any other: resumed on
    another machine, the run ended with the last weights, not the best."""
    _, state = _model_state()
    ckpt = spotrun.Checkpointer(tmp_path, keep_last=None, signals=())
    for step in range(4, 7):
        ckpt.save(state, step)
    ckpt.store.prune(7, keep_last=1, also_keep=(5,))
    assert [step for step, _ in ckpt.store.committed()] == [5, 7]
    ckpt.close()
