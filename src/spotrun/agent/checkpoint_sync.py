"""Checkpoints between the instance's disk and the durable store (any fsspec filesystem).

Both sides obey the layout of `spotrun.sdk.layout`: a `ckpt-<step>/` folder counts only once its
manifest is present, so every copy writes payload files first and the manifest last, and removes a
stale manifest before overwriting a folder. Besides checkpoints, top-level user files travel too.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spotrun.agent.heartbeat import CheckpointProgress
from spotrun.sdk.backup_marks import BackupWriter, write_mark
from spotrun.sdk.locations import url_to_fs
from spotrun.sdk.layout import (
    CHECKPOINT_PREFIX, MANIFEST_NAME, list_committed, parse_step, read_manifest, remove_folder, save_seconds_of,
)

log = logging.getLogger(__name__)

COPY_BUFFER_BYTES = 8 * 1024 * 1024
FILES_AT_ONCE = 4  # a checkpoint's files in flight together (s3fs sends each large one in parts besides)
S3_PART_BYTES = 16 * 2**20  # AWS's guidance for parts and byte ranges: 8 or 16 MB
S3_MAX_PARTS = 10_000


class CopyDamaged(Exception):
    """A checkpoint copied from the store does not match its manifest (an object cut short)."""


# What a retry cannot mend: an object cut short or missing, a manifest that is not JSON.
DAMAGED = (CopyDamaged, FileNotFoundError, ValueError)


class BackupCutShort(Exception):
    """The reclaim deadline came, or a stop was asked, before the copy was finished."""


@dataclass(frozen=True)
class Cutoff:
    """When a copy must stop: at a unix-time deadline, or once an event is set."""

    deadline: float | None = None
    stop: threading.Event | None = None
    clock: Callable[[], float] = time.time

    def check(self) -> None:
        if self.deadline is not None and self.clock() >= self.deadline:
            raise BackupCutShort("the reclaim deadline passed")
        if self.stop is not None and self.stop.is_set():
            raise BackupCutShort("stop was asked")


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def is_user_file(name: str) -> bool:
    """A top-level file that travels with the checkpoints (not a checkpoint, not hidden, not a temp file)."""
    return not (name.startswith(CHECKPOINT_PREFIX) or name.startswith(".") or name.endswith(".tmp"))


class _Side:
    """One end of a copy: a filesystem and the checkpoint root on it."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")

    def committed(self) -> list[tuple[int, str]]:
        return list_committed(self.fs, self.root)

    def newest_progress(self) -> CheckpointProgress | None:
        """The newest committed checkpoint's step, and the run's total steps when its manifest names a valid one.

        Asked every heartbeat: folders are tried newest first, so usually one manifest is read, not all of them."""
        for step, path in reversed(self.checkpoint_folders()):
            manifest = read_manifest(self.fs, path)
            if manifest is not None:
                total = manifest.get("total_steps")
                valid = isinstance(total, int) and not isinstance(total, bool) and total >= max(step, 1)
                return CheckpointProgress(step, total if valid else None, save_seconds_of(manifest))
        return None

    def manifest_bytes(self, checkpoint_path: str) -> bytes | None:
        """The raw manifest of a checkpoint folder when it is a valid one, else None."""
        if read_manifest(self.fs, checkpoint_path) is None:
            return None
        try:
            return bytes(self.fs.cat_file(_join(checkpoint_path, MANIFEST_NAME)))
        except (FileNotFoundError, OSError):
            return None

    def checkpoint_folders(self) -> list[tuple[int, str]]:
        """(step, path) of every ckpt-* folder, committed or not."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:  # not made yet; one that cannot be read raises (``list_committed``)
            return []
        found = [(parse_step(path), path) for path in entries]
        return sorted((step, path) for step, path in found if step is not None)

    def user_files(self) -> list[dict[str, Any]]:
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return [e for e in entries if e.get("type") == "file" and is_user_file(_basename(e["name"]))]


class CheckpointSync:
    def __init__(
        self,
        local_dir: Path,
        store: str,
        storage_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        writer: BackupWriter | None = None,
    ) -> None:
        """`writer`: the attempt whose backups these are, marked in the store after each backup that wrote to it
        (`sdk.backup_marks`); None marks nothing."""
        self.local = _Side(LocalFileSystem(), str(local_dir))
        self._writer = writer
        self._store_uri = store
        self._storage_options = storage_options or {}
        self._store: _Side | None = None
        self._clock = clock
        self._lock = threading.Lock()  # one backup at a time: the periodic one and the final one
        # told of each checkpoint a backup uploaded: its step, its save's seconds (None: not timed), the upload's
        self.on_uploaded: Callable[[int, float | None, float], None] | None = None
        self._synced_user_files: dict[str, tuple[int, float]] = {}  # name -> (size, mtime) last copied

    @property
    def store(self) -> _Side:
        """The store's filesystem, opened on first use, so that a bad URI fails the restore, not the agent."""
        if self._store is None:
            store_fs, store_root = url_to_fs(self._store_uri, self._storage_options)  # a local path with "::" is one
            self._store = _Side(store_fs, store_root)
        return self._store

    def newest_local_progress(self) -> CheckpointProgress | None:
        return self.local.newest_progress()

    def restore(self, older_on_error: bool = True, stop: threading.Event | None = None) -> int | None:
        """Copy every committed store checkpoint and the user files to the local disk; the newest step or None.
        A damaged checkpoint is skipped for an older one. Any other error (the store not answering) skips it
        only with `older_on_error`; without, it is raised while nothing newer is restored, so that a retry can
        still resume from the newest instead of losing the steps between. Once `stop` is set, the copy stops
        between files (BackupCutShort)."""
        cutoff = Cutoff(stop=stop)
        with self._lock:
            self.store.fs.invalidate_cache()  # listings cached by a shared fsspec instance may be stale
            Path(self.local.root).mkdir(parents=True, exist_ok=True)
            committed = self.store.committed()
            restored, failures = [], []
            for step, path in reversed(committed):
                try:
                    self._restore_checkpoint(path, cutoff)
                except BackupCutShort:
                    raise
                except Exception as error:  # this one cannot be had; an older one may
                    if not (restored or older_on_error or isinstance(error, DAMAGED)):
                        raise
                    failures.append(error)
                    log.warning("cannot restore checkpoint step %d (%s); skipped", step, error)
                    continue
                restored.append(step)
                log.info("restored checkpoint step %d", step)
            if failures and not restored:
                raise failures[0]
            for entry in self.store.user_files():
                cutoff.check()
                name = _basename(entry["name"])
                target = _join(self.local.root, name)
                _copy_file(self.store.fs, entry["name"], self.local.fs, target)
                self._remember_synced(name)
            return max(restored, default=None)

    def _restore_checkpoint(self, path: str, cutoff: Cutoff) -> None:
        """Copy one store checkpoint here, its files checked against the manifest's sizes (a truncated object
        would be reported as progress the trainer then cannot resume from); nothing of it is left on failure."""
        local_path = _join(self.local.root, _basename(path))
        try:
            manifest = self._copy_checkpoint(self.store, path, self.local, cutoff)
            if manifest is not None:
                _check_sizes(self.local.fs, local_path, json.loads(manifest))
        except BaseException:
            if self.local.fs.exists(local_path):
                remove_folder(self.local.fs, local_path)
            raise

    def backup(self, deadline: float | None = None, stop: threading.Event | None = None) -> bool:
        """Upload new local checkpoints (newest first) and changed user files, then drop store checkpoints the
        trainer has deleted locally. True when the store holds every committed local checkpoint.
        The copy is cut short (between files) at `deadline` (unix seconds) or once `stop` is set."""
        with self._lock:
            self.store.fs.invalidate_cache()
            cutoff = Cutoff(deadline, stop, self._clock)
            complete = True
            uploaded = user_files_uploaded = False
            try:
                for step, path in reversed(self.local.committed()):
                    started = time.monotonic()
                    copied = self._copy_checkpoint(self.local, path, self.store, cutoff)
                    if copied is not None:
                        uploaded = True
                        self._tell_uploaded(step, copied, time.monotonic() - started)
                user_files_uploaded = self._upload_user_files(cutoff)
            except BackupCutShort as cut:
                log.warning("checkpoint backup cut short: %s", cut)
                complete = False
            if uploaded or user_files_uploaded:
                self._mark_backup(cutoff)
            if uploaded and complete:  # no pruning on borrowed time
                self._prune_store()
            return complete

    def _tell_uploaded(self, step: int, manifest: bytes, seconds: float) -> None:
        if self.on_uploaded is None:
            return
        try:
            self.on_uploaded(step, save_seconds_of(json.loads(manifest)), seconds)
        except Exception:  # a report that fails must not stop the backup
            log.exception("cannot report checkpoint %d's upload", step)

    def _copy_checkpoint(self, source: _Side, path: str, target: _Side, cutoff: Cutoff) -> bytes | None:
        """Copy one committed folder, manifest last; the manifest copied, or None when the target already has it or
        the folder vanished."""
        name = _basename(path)
        manifest = source.manifest_bytes(path)
        if manifest is None:
            log.info("checkpoint %s vanished before it was copied", name)
            return None
        target_path = _join(target.root, name)
        if _same_manifest(target.manifest_bytes(target_path), manifest):
            return None
        target_manifest = _join(target_path, MANIFEST_NAME)
        if target.fs.exists(target_manifest):
            target.fs.rm_file(target_manifest)  # uncommit the stale copy before overwriting it
        try:
            files = [
                (file_path, _join(target_path, relative))
                for file_path in source.fs.find(path)
                if (relative := file_path[len(path.rstrip("/")) + 1 :]) and relative != MANIFEST_NAME
            ]
            _copy_files(source.fs, files, target.fs, cutoff)
        except FileNotFoundError:
            log.info("checkpoint %s was deleted while it was copied; skipped", name)
            return None
        # A folder removed (the trainer's keep-last-N) or replaced while its files were listed listed none of them, or
        # others: its manifest must not commit what was not copied.
        if not _same_manifest(source.manifest_bytes(path), manifest):
            log.info("checkpoint %s was deleted or replaced while it was copied; skipped", name)
            return None
        cutoff.check()
        _write_bytes(target.fs, target_manifest, manifest)
        log.info("copied checkpoint %s", name)
        return manifest

    def _mark_backup(self, cutoff: Cutoff) -> None:
        """The writer's mark in the store: its instance was alive as this backup was written. Not past the cutoff,
        and a mark that cannot be written fails nothing (the controller then bills as without it)."""
        if self._writer is None:
            return
        try:
            cutoff.check()
            write_mark(self.store.fs, self.store.root, self._writer, self._clock())
        except BackupCutShort:
            return
        except Exception as error:
            log.warning("cannot mark the backup as attempt %d's in the store (%s: %s)",
                        self._writer.attempt_id, type(error).__name__, error)

    def _upload_user_files(self, cutoff: Cutoff) -> bool:
        """Copy the user files changed since they were last copied; whether any was."""
        uploaded = False
        for entry in self.local.user_files():
            name = _basename(entry["name"])
            if self._synced_user_files.get(name) == (entry["size"], entry["mtime"]):
                continue
            cutoff.check()
            try:
                _copy_file(self.local.fs, entry["name"], self.store.fs, _join(self.store.root, name))
            except FileNotFoundError:
                continue
            self._synced_user_files[name] = (entry["size"], entry["mtime"])
            uploaded = True
        return uploaded

    def _prune_store(self) -> None:
        """Remove store folders older than the store's newest checkpoint that are gone locally (the SDK's
        keep-last-N) and dead partial uploads; never the newest committed store checkpoint."""
        store_committed = self.store.committed()
        if not store_committed:
            return
        newest = store_committed[-1][0]
        kept_locally = {step for step, _ in self.local.checkpoint_folders()}
        for step, path in self.store.checkpoint_folders():
            if step < newest and step not in kept_locally:
                remove_folder(self.store.fs, path)
                log.info("removed %s from the store", _basename(path))

    def _remember_synced(self, name: str) -> None:
        info = self.local.fs.info(_join(self.local.root, name))
        self._synced_user_files[name] = (info["size"], info["mtime"])


def _check_sizes(fs: fsspec.AbstractFileSystem, path: str, manifest: dict[str, Any]) -> None:
    for name, entry in manifest.get("files", {}).items():
        size = entry.get("size") if isinstance(entry, dict) else None
        if isinstance(size, int) and (held := fs.size(_join(path, name))) != size:
            raise CopyDamaged(f"{_basename(path)}/{name} holds {held} bytes, its manifest says {size}")


def _same_manifest(existing: bytes | None, wanted: bytes) -> bool:
    return existing is not None and json.loads(existing) == json.loads(wanted)


def _make_parent(fs: fsspec.AbstractFileSystem, path: str) -> None:
    parent = path.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)


def _copy_files(
    src_fs: fsspec.AbstractFileSystem, pairs: list[tuple[str, str]], dst_fs: fsspec.AbstractFileSystem, cutoff: Cutoff
) -> None:
    """Each (source, target) pair copied, ``FILES_AT_ONCE`` at a time: a sharded checkpoint is one file per rank, each
    too small to be sent in parts. ``cutoff`` is checked as each file starts; the first failure stops the files
    not started and is raised once those started are done."""

    def copy(src: str, dst: str) -> None:
        cutoff.check()
        _copy_file(src_fs, src, dst_fs, dst)

    with ThreadPoolExecutor(FILES_AT_ONCE, "spotrun-copy") as pool:
        futures = [pool.submit(copy, src, dst) for src, dst in pairs]
        for future in futures:
            if future.exception() is not None:
                pool.shutdown(cancel_futures=True)
                future.result()


def _copy_file(src_fs: fsspec.AbstractFileSystem, src: str, dst_fs: fsspec.AbstractFileSystem, dst: str) -> None:
    """One file, through the store's own transfer where one side is this disk: s3fs sends and fetches a large file
    as parts over several connections at once (``max_concurrency`` in the storage options, 10 by default), where a
    stream through ``open`` sends one part after another over one; a local or mounted store copies in the kernel."""
    _make_parent(dst_fs, dst)
    if _is_local(src_fs):
        dst_fs.put_file(src, dst, **_s3_parts(dst_fs, src_fs.size(src)))
    elif _is_local(dst_fs):
        src_fs.get_file(src, dst, **_s3_parts(src_fs))
    else:
        with src_fs.open(src, "rb") as reader, dst_fs.open(dst, "wb") as writer:
            shutil.copyfileobj(reader, writer, COPY_BUFFER_BYTES)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def _s3_parts(fs: fsspec.AbstractFileSystem, size: int = 0) -> dict[str, int]:
    """S3's parts and ranges at ``S3_PART_BYTES`` (s3fs's own 50 MiB leaves a file under 100 MiB, a rank's shard,
    on one connection), larger where an upload of ``size`` bytes would need more parts than S3 takes."""
    if "s3" not in _protocols(fs):
        return {}
    return {"chunksize": max(S3_PART_BYTES, -(-size // S3_MAX_PARTS))}


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


def _write_bytes(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    _make_parent(fs, path)
    with fs.open(path, "wb") as writer:
        writer.write(data)


class PeriodicBackup:
    """Runs `sync.backup()` every interval in a thread; a failed backup is logged and tried again next time."""

    def __init__(self, sync: CheckpointSync, interval: float) -> None:
        self._sync = sync
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spotrun-backup", daemon=True)

    def start(self) -> PeriodicBackup:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, cutting the backup in progress short after its current file (the final backup takes over)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sync.backup(stop=self._stop)
            except Exception:
                log.exception("periodic checkpoint backup failed; will retry")
