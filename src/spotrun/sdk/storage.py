"""Where checkpoints are written, through fsspec: a local disk (staged aside, committed by an atomic folder
rename) or an object store (written in place, committed by the manifest written last).

Either way a folder counts as a checkpoint only once its manifest is there (see ``layout``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spotrun.sdk import layout

STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"


class CheckpointStore:
    """A checkpoint root on an fsspec filesystem; this base class is the object-store flavour."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fs.unstrip_protocol(self.root)!r})"

    def path(self, step: int) -> str:
        return f"{self.root}/{layout.checkpoint_name(step)}"

    def committed(self) -> list[tuple[int, str]]:
        """(step, path) of every folder with a manifest, oldest first; checksums are not verified here."""
        self.fs.invalidate_cache(self.root)
        return layout.list_committed(self.fs, self.root)

    def candidates(self) -> list[tuple[int, str]]:
        """(step, path) of every folder with a manifest file, readable or not, oldest first."""
        self.fs.invalidate_cache(self.root)
        return layout.list_candidates(self.fs, self.root)

    def checkpoint_folders(self) -> list[tuple[int, str]]:
        """(step, path) of every ckpt-* folder, committed or not, oldest first."""
        self.fs.invalidate_cache(self.root)
        try:
            entries = self.fs.ls(self.root, detail=False)
        except (FileNotFoundError, OSError):
            return []
        return sorted((step, path) for path in entries if (step := layout.parse_step(path)) is not None)

    def read_verified(self, path: str, names: list[str] | None = None) -> dict[str, bytes]:
        return layout.read_verified(self.fs, path, names)

    def staging_path(self, step: int) -> str:
        """Where the payload of ``step`` is written before it is committed."""
        return self.path(step)

    def prepare(self, step: int) -> str:
        """An empty staging folder for ``step``; an earlier checkpoint of the same step is uncommitted first."""
        self.remove(self.path(step))
        return self.staging_path(step)

    def write(self, staging: str, name: str, data: bytes) -> None:
        self.fs.pipe_file(f"{staging}/{name}", data)

    def commit(self, staging: str, step: int, manifest: dict[str, Any]) -> None:
        self.fs.pipe_file(f"{staging}/{layout.MANIFEST_NAME}", layout.encode_manifest(manifest))

    def remove(self, path: str) -> None:
        """Delete a checkpoint folder, manifest first, so a half-deleted one is never taken as committed."""
        manifest = f"{path}/{layout.MANIFEST_NAME}"
        if self.fs.exists(manifest):
            self.fs.rm(manifest)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def clean_staging(self) -> None:
        """Leftovers of saves that died half-way; an object store has none outside the checkpoint folders."""


class LocalStore(CheckpointStore):
    """A local (or mounted) disk: stage in a hidden folder, fsync files and folders, rename into place."""

    def staging_path(self, step: int) -> str:
        return f"{self.root}/{STAGING_PREFIX}{layout.checkpoint_name(step)}"

    def prepare(self, step: int) -> str:
        staging = self.staging_path(step)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        return staging

    def write(self, staging: str, name: str, data: bytes) -> None:
        with self.fs.open(f"{staging}/{name}", "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def commit(self, staging: str, step: int, manifest: dict[str, Any]) -> None:
        self.write(staging, layout.MANIFEST_NAME, layout.encode_manifest(manifest))
        _fsync_dir(staging)
        final = self.path(step)
        replaced = None
        if os.path.exists(final):  # a checkpoint of the same step from an earlier run: swap it out
            replaced = self._trash_path(final)
            os.rename(final, replaced)
        os.rename(staging, final)
        _fsync_dir(self.root)
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)

    def remove(self, path: str) -> None:
        if not os.path.exists(path):
            return
        trash = self._trash_path(path)
        os.rename(path, trash)  # atomic uncommit
        _fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)

    def clean_staging(self) -> None:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith((STAGING_PREFIX, TRASH_PREFIX)):
                shutil.rmtree(f"{self.root}/{name}", ignore_errors=True)

    def _trash_path(self, path: str) -> str:
        return f"{self.root}/{TRASH_PREFIX}{os.path.basename(path)}-{uuid.uuid4().hex[:8]}"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_store(
    location: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
) -> CheckpointStore:
    """The store at a local path or URL (file://, s3://, gs://, ...); ``fs`` overrides the filesystem."""
    location = os.fspath(location)
    if not location:
        raise ValueError("checkpoint location is empty: give a path or URL, or set SPOTRUN_CHECKPOINT_DIR")
    if fs is None:
        fs, root = fsspec.core.url_to_fs(location, **(storage_options or {}))
    else:
        root = fs._strip_protocol(location)
    if isinstance(fs, LocalFileSystem):
        os.makedirs(root, exist_ok=True)
        return LocalStore(fs, root)
    return CheckpointStore(fs, root)
