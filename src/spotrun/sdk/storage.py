"""Where checkpoints are written, through fsspec: a local disk (staged aside, committed by an atomic folder
rename) or an object store (written in place, committed by the manifest written last).

Either way a folder counts as a checkpoint only once its manifest is there (see ``layout``).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spotrun.sdk import layout

STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
HASH_IN_PARALLEL_BYTES = 1 << 20  # smaller chunks are hashed inline: a thread hand-off costs more

HASH_READ_CHUNK = 16 << 20

Serializer = Callable[[BinaryIO], None]
Loader = Callable[[str | BinaryIO], Any]


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

    def load_verified(self, path: str, names: list[str] | None, load: Loader) -> dict[str, Any]:
        """``load`` applied to each payload file named (default: all) once it matches the manifest
        (CorruptCheckpoint otherwise); here ``load`` is given the verified bytes as a file object."""
        return {name: load(io.BytesIO(data)) for name, data in self.read_verified(path, names).items()}

    def staging_path(self, step: int) -> str:
        """Where the payload of ``step`` is written before it is committed."""
        return self.path(step)

    def prepare(self, step: int) -> str:
        """An empty staging folder for ``step``; an earlier checkpoint of the same step is uncommitted first."""
        self.remove(self.path(step))
        return self.staging_path(step)

    def write(self, staging: str, name: str, data: bytes) -> None:
        self.fs.pipe_file(f"{staging}/{name}", data)

    def write_payload(self, staging: str, name: str, serialize: Serializer) -> dict[str, Any]:
        """Write what ``serialize`` writes to the file it is given; its manifest entry (size, sha256).
        An object is uploaded whole, so the payload is gathered in memory first."""
        buffer = io.BytesIO()
        serialize(buffer)
        data = buffer.getvalue()
        del buffer
        self.write(staging, name, data)
        return layout.describe_bytes(data)

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

    def load_verified(self, path: str, names: list[str] | None, load: Loader) -> dict[str, Any]:
        """As for any store, but each file is hashed as it is read (the hash overlapping the next read) and
        then ``load`` is given its path: loading from a path (page cache) is much faster than from bytes in
        memory, and no copy of the file is held. A file changed between the check and the load is not
        caught: only the SDK writes checkpoint folders."""
        loaded = {}
        for name, entry in layout.manifest_entries(self.fs, path, names):
            file = f"{path.rstrip('/')}/{name}"
            try:
                described = _describe_file(file)
            except OSError as error:
                raise layout.unreadable(path, name, error) from error
            layout.check_entry(path, name, described, entry)
            loaded[name] = load(file)
        return loaded

    def write_payload(self, staging: str, name: str, serialize: Serializer) -> dict[str, Any]:
        """Stream the payload to disk, hashing it on the way: no copy of the serialized payload is held in
        memory (a save's extra memory stays at the host snapshot it writes)."""
        with self.fs.open(f"{staging}/{name}", "wb") as fh, ThreadPoolExecutor(1, "spotrun-hash") as hasher:
            hashing = _HashingWriter(fh, hasher)
            serialize(hashing)
            fh.flush()
            os.fsync(fh.fileno())
        return hashing.describe()

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


class _HashingWriter:
    """A write-only file that passes what it is given on and computes its size and SHA-256. A large chunk
    is hashed in a helper thread while it is written (hashlib and file writes both release the GIL), so
    hashing hardly adds to the time of a save; ``write`` returns only once both are done with the chunk,
    since the caller may reuse its buffer."""

    def __init__(self, raw: BinaryIO, hasher: ThreadPoolExecutor) -> None:
        self._raw = raw
        self._hasher = hasher
        self._sha256 = hashlib.sha256()
        self._size = 0

    def write(self, data: Any) -> int:
        chunk = memoryview(data).cast("B")
        if chunk.nbytes >= HASH_IN_PARALLEL_BYTES:
            hashed = self._hasher.submit(self._sha256.update, chunk)
            self._raw.write(chunk)
            hashed.result()
        else:
            self._sha256.update(chunk)
            self._raw.write(chunk)
        self._size += chunk.nbytes
        return chunk.nbytes

    def flush(self) -> None:
        self._raw.flush()

    def describe(self) -> dict[str, Any]:
        return {"size": self._size, "sha256": self._sha256.hexdigest()}


def _describe_file(path: str) -> dict[str, Any]:
    """Size and SHA-256 of a file, read in chunks into two buffers in turn: one is hashed in a helper thread
    while the next chunk is read into the other."""
    sha256 = hashlib.sha256()
    size = 0
    buffers = (bytearray(HASH_READ_CHUNK), bytearray(HASH_READ_CHUNK))
    with open(path, "rb", buffering=0) as fh, ThreadPoolExecutor(1, "spotrun-hash") as hasher:
        hashing = None
        for turn in itertools.count():
            buffer = buffers[turn % 2]
            read = fh.readinto(buffer)
            if hashing is not None:
                hashing.result()
            if not read:
                break
            hashing = hasher.submit(sha256.update, memoryview(buffer)[:read])
            size += read
    return {"size": size, "sha256": sha256.hexdigest()}


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
