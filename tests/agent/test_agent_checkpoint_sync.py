"""CheckpointSync: restore and backup between a local folder and an fsspec store, in the SDK's layout."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import fsspec
import pytest

from spotrun.agent import checkpoint_sync, supervisor
from spotrun.agent.checkpoint_sync import CheckpointSync
from spotrun.sdk.backup_marks import MARKS_FOLDER, BackupWriter, mark_written_at
from spotrun.sdk.layout import MANIFEST_NAME, checkpoint_name, list_committed


def write_checkpoint(root: Path, step: int, payload: bytes = b"", committed: bool = True) -> Path:
    folder = root / checkpoint_name(step)
    (folder / "optim").mkdir(parents=True, exist_ok=True)
    files = {"model.bin": payload or f"model-{step}".encode(), "optim/state.bin": f"optim-{step}".encode()}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if committed:
        manifest = {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in files.items()}
        (folder / MANIFEST_NAME).write_text(json.dumps({"step": step, "files": manifest}))
    return folder


def committed_steps(root: Path) -> list[int]:
    return [step for step, _ in list_committed(fsspec.filesystem("file"), str(root))]


@pytest.fixture
def local(tmp_path: Path) -> Path:
    path = tmp_path / "local"
    path.mkdir()
    return path


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return tmp_path / "remote"


def test_backup_uploads_committed_checkpoints_and_user_files_only(local, remote):
    write_checkpoint(local, 1)
    write_checkpoint(local, 2, committed=False)  # being written by the trainer
    (local / "notes.txt").write_text("user data")
    (local / ".hidden").write_text("scratch")

    assert CheckpointSync(local, remote.as_uri()).backup() is True

    assert sorted(p.name for p in remote.iterdir()) == [checkpoint_name(1), "notes.txt"]
    assert (remote / checkpoint_name(1) / "optim" / "state.bin").read_bytes() == b"optim-1"
    assert committed_steps(remote) == [1]


def test_a_store_folder_with_double_colons_in_its_name_is_that_folder(local, tmp_path):
    """fsspec reads "::" as the joint of a chained URL: backups to runs/lr::0.1 and runs/lr::0.2 both went to runs/lr."""
    write_checkpoint(local, 1)
    for name in ("lr::0.1", "lr::0.2"):
        assert CheckpointSync(local, str(tmp_path / "runs" / name)).backup() is True
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["lr::0.1", "lr::0.2"]
    assert CheckpointSync(tmp_path / "fresh", str(tmp_path / "runs" / "lr::0.2")).restore() == 1


def test_backup_writes_the_manifest_after_every_payload_file(local, remote, monkeypatch):
    write_checkpoint(local, 4)
    written: list[str] = []
    real_copy, real_write = checkpoint_sync._copy_file, checkpoint_sync._write_bytes
    monkeypatch.setattr(checkpoint_sync, "_copy_file", lambda sf, s, df, d: (written.append(d), real_copy(sf, s, df, d)))
    monkeypatch.setattr(checkpoint_sync, "_write_bytes", lambda fs, p, data: (written.append(p), real_write(fs, p, data)))

    CheckpointSync(local, str(remote)).backup()

    names = [Path(p).name for p in written]  # the payload files go up together, in either order
    assert sorted(names[:2]) == ["model.bin", "state.bin"] and names[2:] == [MANIFEST_NAME]


def test_a_checkpoint_pruned_as_its_backup_starts_is_not_committed_in_the_store(local, remote, monkeypatch):
    """The trainer's keep-last-N removed the folder between the agent's read of its manifest and the listing of its
    files: the store got the manifest alone, a committed checkpoint without a byte of payload, and a restore from
    that store failed instead of starting fresh."""
    folder = write_checkpoint(local, 5)
    sync = CheckpointSync(local, str(remote))
    read_manifest = sync.local.manifest_bytes

    def read_then_pruned(path: str) -> bytes | None:
        manifest = read_manifest(path)
        shutil.rmtree(folder, ignore_errors=True)  # the SDK's prune, as the copy starts
        return manifest

    monkeypatch.setattr(sync.local, "manifest_bytes", read_then_pruned)
    sync.backup()

    assert committed_steps(remote) == []
    assert CheckpointSync(local.parent / "fresh", str(remote)).restore() is None


def test_backup_skips_checkpoints_the_store_already_has(local, remote):
    write_checkpoint(local, 1)
    sync = CheckpointSync(local, str(remote))
    sync.backup()
    stored = remote / checkpoint_name(1) / "model.bin"
    before = stored.stat().st_mtime_ns
    time.sleep(0.01)
    assert sync.backup() is True
    assert stored.stat().st_mtime_ns == before


def test_backup_replaces_a_store_copy_with_a_different_manifest(local, remote):
    write_checkpoint(remote, 1, payload=b"stale")
    write_checkpoint(local, 1, payload=b"fresh")
    CheckpointSync(local, str(remote)).backup()
    assert (remote / checkpoint_name(1) / "model.bin").read_bytes() == b"fresh"
    assert (remote / checkpoint_name(1) / MANIFEST_NAME).read_bytes() == (
        local / checkpoint_name(1) / MANIFEST_NAME
    ).read_bytes()


def test_backup_prunes_what_the_trainer_deleted_but_never_the_newest_in_the_store(local, remote):
    sync = CheckpointSync(local, str(remote))
    for step in (1, 2, 3):
        write_checkpoint(local, step)
    sync.backup()
    write_checkpoint(remote, 0, committed=False)  # a dead partial upload
    for folder in local.iterdir():
        if folder.name == checkpoint_name(1):
            for path in sorted(folder.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            folder.rmdir()
    write_checkpoint(local, 4)

    sync.backup()

    assert committed_steps(remote) == [2, 3, 4]
    assert not (remote / checkpoint_name(0)).exists()

    write_checkpoint(remote, 9)  # newer than anything local (another attempt's): must survive
    write_checkpoint(local, 5)
    sync.backup()
    assert 9 in committed_steps(remote)


def test_nothing_is_pruned_when_nothing_new_was_uploaded(local, remote):
    write_checkpoint(remote, 1)
    write_checkpoint(remote, 2)
    assert CheckpointSync(local, str(remote)).backup() is True
    assert committed_steps(remote) == [1, 2]


def test_backup_past_its_deadline_leaves_no_committed_checkpoint(local, remote):
    write_checkpoint(local, 1)
    assert CheckpointSync(local, str(remote)).backup(deadline=time.time() - 1) is False
    assert committed_steps(remote) == []


def test_restore_copies_committed_checkpoints_and_user_files(local, remote):
    write_checkpoint(remote, 1)
    write_checkpoint(remote, 2)
    write_checkpoint(remote, 3, committed=False)
    (remote / "vocab.json").write_text("{}")
    sync = CheckpointSync(local, str(remote))

    assert sync.restore() == 2
    assert sorted(p.name for p in local.iterdir()) == [checkpoint_name(1), checkpoint_name(2), "vocab.json"]
    assert sync.newest_local_progress().step == 2
    assert (local / checkpoint_name(2) / "optim" / "state.bin").read_bytes() == b"optim-2"


@pytest.mark.parametrize(("total", "expected"), [(20, 20), (None, None), ("20", None), (1, None), (True, None)])
def test_newest_progress_names_the_total_steps_only_when_the_manifest_holds_a_valid_one(local, total, expected):
    write_checkpoint(local, 1)
    folder = write_checkpoint(local, 2)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    (folder / MANIFEST_NAME).write_text(json.dumps({**manifest, "total_steps": total}))
    progress = CheckpointSync(local, "unused://").newest_local_progress()
    assert progress is not None and (progress.step, progress.total_steps) == (2, expected)


def test_restore_from_an_empty_store_returns_none(local, remote):
    assert CheckpointSync(local, str(remote)).restore() is None
    assert list(local.iterdir()) == []


def test_memory_store_round_trip(local, tmp_path):
    """Any fsspec filesystem works as the store (here memory://, standing for s3:// and friends)."""
    write_checkpoint(local, 6)
    store_uri = f"memory://spotrun-test-{tmp_path.name}/job"
    assert CheckpointSync(local, store_uri).backup() is True
    fresh = tmp_path / "fresh"
    assert CheckpointSync(fresh, store_uri).restore() == 6
    assert (fresh / checkpoint_name(6) / "model.bin").read_bytes() == b"model-6"


def test_a_stopped_backup_leaves_no_committed_checkpoint(local, remote):
    write_checkpoint(local, 1)
    stop = threading.Event()
    stop.set()
    assert CheckpointSync(local, str(remote)).backup(stop=stop) is False
    assert committed_steps(remote) == []


def test_a_checkpoints_files_are_copied_together(local, remote, monkeypatch):
    """A sharded checkpoint is a file per rank, each too small to go in parts: they travel at once, both ways."""
    write_checkpoint(local, 3)
    together = threading.Barrier(2, timeout=10)  # broken, and the backup fails, unless both files copy at once
    real_copy = checkpoint_sync._copy_file

    def copy_when_both_started(src_fs, src, dst_fs, dst):
        together.wait()
        real_copy(src_fs, src, dst_fs, dst)

    monkeypatch.setattr(checkpoint_sync, "_copy_file", copy_when_both_started)
    assert CheckpointSync(local, str(remote)).backup() is True
    together.reset()
    fresh = local.parent / "fresh"
    assert CheckpointSync(fresh, str(remote)).restore() == 3
    assert (fresh / checkpoint_name(3) / "optim" / "state.bin").read_bytes() == b"optim-3"


def checkpoint_of_many_files(root, step: int):
    """A checkpoint folder with ten more files than its manifest lists (copied all the same)."""
    folder = write_checkpoint(root, step)
    for index in range(10):
        (folder / f"shard-{index}.bin").write_bytes(b"x")
    return folder


def copies_that_set(stop: threading.Event, monkeypatch) -> list:
    """Every file copy sets `stop` as it starts: the destinations of the copies started."""
    started, real_copy = [], checkpoint_sync._copy_file

    def copy_and_stop(src_fs, src, dst_fs, dst):
        started.append(dst)
        stop.set()
        real_copy(src_fs, src, dst_fs, dst)

    monkeypatch.setattr(checkpoint_sync, "_copy_file", copy_and_stop)
    return started


def test_a_stop_during_the_copy_starts_no_more_files_and_commits_nothing(local, remote, monkeypatch):
    checkpoint_of_many_files(local, 2)
    stop = threading.Event()
    started = copies_that_set(stop, monkeypatch)
    assert CheckpointSync(local, str(remote)).backup(stop=stop) is False
    assert committed_steps(remote) == []
    assert 1 <= len(started) <= checkpoint_sync.FILES_AT_ONCE


@pytest.mark.parametrize("size", [0, 16 * 2**20, 200 * 2**30])
def test_s3_parts_are_16_mib_and_never_more_than_s3_takes(size):
    s3 = fsspec.filesystem("s3", anon=True, skip_instance_cache=True)
    chunk = checkpoint_sync._s3_parts(s3, size)["chunksize"]
    assert chunk >= checkpoint_sync.S3_PART_BYTES and chunk * checkpoint_sync.S3_MAX_PARTS >= size
    assert checkpoint_sync._s3_parts(fsspec.filesystem("memory"), size) == {}


def test_a_store_that_cannot_be_listed_fails_the_restore_instead_of_starting_over(local, tmp_path, monkeypatch):
    """Taken for an empty store (any OSError was), a store without permission had the run start over from step 0."""
    remote = tmp_path / "remote"
    write_checkpoint(remote, 5)
    real_ls = fsspec.implementations.local.LocalFileSystem.ls

    def denied(self, path, detail=True, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).rstrip("/").endswith("remote"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_ls(self, path, detail=detail, **kwargs)

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "ls", denied)
    with pytest.raises(PermissionError):
        CheckpointSync(local, str(remote)).restore()
    assert CheckpointSync(local, str(tmp_path / "not-made-yet")).restore() is None  # no folder: nothing saved yet


def test_restore_skips_a_checkpoint_it_cannot_copy_or_that_is_cut_short_and_takes_an_older_one(local, remote):
    write_checkpoint(remote, 5)
    cut = write_checkpoint(remote, 10, payload=b"all of the weights")
    (cut / "model.bin").write_bytes(b"all of")  # the object cut short: its manifest says 18 bytes
    newest = write_checkpoint(remote, 12)
    (newest / "model.bin").unlink()  # listed in the manifest, gone from the store

    assert CheckpointSync(local, str(remote)).restore() == 5
    assert sorted(p.name for p in local.iterdir()) == [checkpoint_name(5)]  # nothing left of the others


def test_restore_fails_when_no_checkpoint_can_be_copied(local, remote):
    cut = write_checkpoint(remote, 10, payload=b"all of the weights")
    (cut / "model.bin").write_bytes(b"all of")
    with pytest.raises(checkpoint_sync.CopyDamaged, match="holds 6 bytes, its manifest says 18"):
        CheckpointSync(local, str(remote)).restore()
    assert list(local.iterdir()) == []


def _failing_once_for(step: int, monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[str]:
    """Copies of checkpoint `step`'s files fail with `error` once; the list holds the files it failed."""
    failed, real_copy = [], checkpoint_sync._copy_file

    def copy(src_fs, src, dst_fs, dst):
        if checkpoint_name(step) in src and not failed:
            failed.append(src)
            raise error
        real_copy(src_fs, src, dst_fs, dst)

    monkeypatch.setattr(checkpoint_sync, "_copy_file", copy)
    return failed


def test_a_store_error_on_the_newest_is_raised_for_a_retry_instead_of_settling_for_an_older_one(
    local, remote, monkeypatch
):
    """Skipping the newest on a store hiccup resumed from an older checkpoint and lost the steps between."""
    write_checkpoint(remote, 5)
    write_checkpoint(remote, 10)
    failed = _failing_once_for(10, monkeypatch, ConnectionResetError("connection reset by peer"))
    sync = CheckpointSync(local, str(remote))
    with pytest.raises(ConnectionResetError):
        sync.restore(older_on_error=False)
    assert failed and list(local.iterdir()) == []
    assert sync.restore(older_on_error=False) == 10  # the retry


def test_the_last_try_settles_for_an_older_checkpoint_and_damage_never_waits_for_a_retry(local, remote, monkeypatch):
    write_checkpoint(remote, 5)
    write_checkpoint(remote, 10)
    _failing_once_for(10, monkeypatch, ConnectionResetError("connection reset by peer"))
    assert CheckpointSync(local, str(remote)).restore() == 5

    fresh = local.parent / "fresh"
    cut = remote / checkpoint_name(10) / "model.bin"
    cut.write_bytes(b"mod")  # cut short: a retry cannot mend it
    assert CheckpointSync(fresh, str(remote)).restore(older_on_error=False) == 5


def test_the_agent_retries_a_restore_that_failed_on_the_newest_before_taking_an_older_one(monkeypatch):
    calls = []

    class Sync:
        def restore(self, older_on_error: bool = True, stop: threading.Event | None = None) -> int:
            calls.append(older_on_error)
            if len(calls) == 1:
                raise ConnectionResetError("connection reset by peer")
            return 10

    not_stopped = SimpleNamespace(wait=lambda seconds: False)  # the pause between tries, not waited out
    agent = SimpleNamespace(sync=Sync())
    assert supervisor.Agent._restore_with_retries(agent, not_stopped) == 10  # type: ignore[arg-type]
    assert calls == [False, False]


def test_a_stopped_restore_starts_no_more_files_and_leaves_no_checkpoint(local, remote, monkeypatch):
    """A notice during the restore: the copy went on to the end, older checkpoints and all, for a trainer that
    would never start."""
    checkpoint_of_many_files(remote, 2)
    write_checkpoint(remote, 1)
    stop = threading.Event()
    started = copies_that_set(stop, monkeypatch)
    with pytest.raises(checkpoint_sync.BackupCutShort):
        CheckpointSync(local, str(remote)).restore(stop=stop)
    assert committed_steps(local) == [] and list(local.iterdir()) == []
    assert 1 <= len(started) <= checkpoint_sync.FILES_AT_ONCE


def test_pruning_a_store_folder_named_like_a_glob_leaves_another_runs_checkpoints_alone(local, tmp_path):
    """fsspec's rm expands `[1]`: the prune of memory://…/exp[1]'s old checkpoint removed exp1's instead."""
    base = f"memory://spotrun-test-{tmp_path.name}"
    other = CheckpointSync(tmp_path / "other", f"{base}/exp1")
    write_checkpoint(tmp_path / "other", 1)
    assert other.backup() is True
    sync = CheckpointSync(local, f"{base}/exp[1]")
    for step in (1, 2):
        write_checkpoint(local, step)
    sync.backup()
    shutil.rmtree(local / checkpoint_name(1))  # the trainer's keep_last
    write_checkpoint(local, 3)
    sync.backup()
    fs = fsspec.filesystem("memory")
    assert [step for step, _ in list_committed(fs, f"{base}/exp[1]")] == [2, 3]
    assert [step for step, _ in list_committed(fs, f"{base}/exp1")] == [1]


WRITER = BackupWriter(job_id=7, attempt_id=42)


def mark_of(remote: Path, writer: BackupWriter = WRITER) -> Path:
    return Path(writer.mark_path(str(remote)))


def test_a_backup_that_wrote_to_the_store_marks_it_as_its_attempts(local, remote):
    """The controller's evidence that the instance was alive then (`control.backup_evidence`)."""
    write_checkpoint(local, 1)
    assert CheckpointSync(local, str(remote), clock=lambda: 1234.5, writer=WRITER).backup() is True

    assert mark_of(remote) == remote / MARKS_FOLDER / "job-7-attempt-42.json"
    assert json.loads(mark_of(remote).read_text()) == {"job_id": 7, "attempt_id": 42, "written_at": 1234.5}
    fs = fsspec.filesystem("file")
    assert mark_written_at(fs, str(remote), WRITER) == mark_of(remote).stat().st_mtime
    assert mark_written_at(fs, str(remote), BackupWriter(job_id=7, attempt_id=43)) is None


def test_the_mark_is_rewritten_only_by_a_backup_that_wrote_something(local, remote):
    write_checkpoint(local, 1)
    sync = CheckpointSync(local, str(remote), writer=WRITER)
    sync.backup()
    os.utime(mark_of(remote), (1000.0, 1000.0))
    sync.backup()  # nothing new
    assert mark_of(remote).stat().st_mtime == 1000.0
    (local / "notes.txt").write_text("a user file changed")
    sync.backup()
    assert mark_of(remote).stat().st_mtime > 1000.0
    os.utime(mark_of(remote), (1000.0, 1000.0))
    write_checkpoint(local, 2)
    sync.backup()
    assert mark_of(remote).stat().st_mtime > 1000.0


def test_the_marks_folder_is_made_once_not_at_every_backup(local, remote, monkeypatch):
    """Each backup asked the store to make the folder again: a request an object store answers every sync_interval."""
    made = []
    real_makedirs = fsspec.implementations.local.LocalFileSystem.makedirs
    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "makedirs",
                        lambda self, path, exist_ok=False: made.append(path) or real_makedirs(self, path, exist_ok))
    sync = CheckpointSync(local, str(remote), writer=WRITER)
    for step in (1, 2, 3):
        write_checkpoint(local, step)
        sync.backup()
    assert [path for path in made if path.endswith(MARKS_FOLDER)] == [str(remote / MARKS_FOLDER)]
    assert json.loads(mark_of(remote).read_text())["attempt_id"] == 42


def test_a_store_with_marks_restores_as_before_and_the_marks_stay_there(local, remote, tmp_path):
    write_checkpoint(local, 1)
    (local / "notes.txt").write_text("hello")
    CheckpointSync(local, str(remote), writer=WRITER).backup()
    fresh = tmp_path / "fresh"
    assert CheckpointSync(fresh, str(remote), writer=BackupWriter(7, 43)).restore() == 1
    assert sorted(p.name for p in fresh.iterdir()) == [checkpoint_name(1), "notes.txt"]
    assert mark_of(remote).exists() and not mark_of(remote, BackupWriter(7, 43)).exists()


def test_a_mark_the_store_refuses_fails_no_backup(local, remote, caplog):
    write_checkpoint(local, 1)
    remote.mkdir()
    (remote / MARKS_FOLDER).write_text("a file where the marks' folder goes")
    assert CheckpointSync(local, str(remote), writer=WRITER).backup() is True
    assert committed_steps(remote) == [1]
    assert "cannot mark the backup as attempt 42's" in caplog.text


def test_a_backup_cut_short_at_its_deadline_writes_no_mark(local, remote):
    write_checkpoint(local, 1)
    assert CheckpointSync(local, str(remote), writer=WRITER).backup(deadline=time.time() - 1) is False
    assert not mark_of(remote).exists()
