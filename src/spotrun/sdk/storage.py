"""Where checkpoints are written, through fsspec: a local disk (staged aside, committed by an atomic folder
rename) or an object store (written in place, committed by the manifest written last).

Either way a folder counts as a checkpoint only once its manifest is there (see ``layout``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spotrun import libc
from spotrun.sdk import directio, layout, parts, ranges, tensorfile, threads
from spotrun.sdk.errors import CheckpointError
from spotrun.sdk.locations import url_to_fs
from spotrun.sdk.writerlock import WriterLock

STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
HASH_IN_PARALLEL_BYTES = 1 << 20  # smaller chunks are hashed inline: a thread hand-off costs more
WRITE_CHUNK = 16 << 20  # a large write goes out in pieces, each handed to the disk as soon as it is written

Serializer = Callable[[BinaryIO], None]
log = logging.getLogger(__name__)

# How long a first save waits for the folder's lock: a restore elsewhere holds it while it clears leftovers (a
# moment), another writer for its whole life
CLAIM_WAIT_SECONDS = 2.0
CHECKPOINT_DIR_ENV = "SPOTRUN_CHECKPOINT_DIR"
DEFAULT_LOCATION = "checkpoints"


def checkpoint_location(location: str | os.PathLike[str] | None) -> str | os.PathLike[str]:
    """``location`` when given, else ``$SPOTRUN_CHECKPOINT_DIR`` (the agent sets it), else ``./checkpoints``."""
    return location if location is not None else os.environ.get(CHECKPOINT_DIR_ENV) or DEFAULT_LOCATION


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

    def load_verified(
        self, path: str, names: list[str] | None = None, manifest: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The decoded payload files named (default: all; see ``tensorfile``), each read once: checksummed as
        it is read (in a helper thread, overlapping the reading) and decoded only once it matches the
        manifest (``manifest``: the folder's, when the caller has read it). CorruptCheckpoint names the first
        file that is missing, unlisted, damaged or malformed."""
        entries = layout.manifest_entries(self.fs, path, names, manifest)
        return {name: self._load_file(path, name, entry) for name, entry in entries}

    def _load_file(self, path: str, name: str, entry: dict[str, Any]) -> Any:
        algorithm = layout.checksum_algorithm(path, name, entry)
        size = entry.get("size")
        if not isinstance(size, int) or size < 0:
            raise layout.CorruptCheckpoint(f"{path}: {name} has no valid size in the manifest")
        try:
            with self._open_for_reading(f"{path}/{name}", size) as (fh, direct):
                with _OverlappedHash(algorithm) as hashing:
                    decode = tensorfile.read(fh, size, hashing.update, direct)
                layout.check_entry(path, name, hashing.describe(), entry)
                return decode()
        except tensorfile.FormatError as error:
            raise layout.CorruptCheckpoint(
                f"{path}: {name} does not match its size/checksum in the manifest ({error})"
            ) from error
        except OSError as error:
            raise layout.unreadable(path, name, error) from error

    @contextmanager
    def _open_for_reading(self, file: str, size: int) -> Iterator[tuple[BinaryIO, directio.DirectFile | None]]:
        """The file of ``size`` bytes, and the same file open for direct reads where that is available (see
        ``directio``). In an object store a large one is read as ranges fetched several at once (``ranges``)."""
        if size <= ranges.RANGE_BYTES:
            with self.fs.open(file, "rb") as fh:
                yield fh, None
            return
        with ranges.RangeReader(self.fs, file, size) as reader:
            yield reader, None  # type: ignore[misc]

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
        """Stream what ``serialize`` writes to the object, checksumming it on the way; its manifest entry. The
        object goes up in parts as they fill (S3: ``parts.PartUpload``, several parts at once, holding up to
        ``parts.BYTES_IN_FLIGHT``; gcsfs: a resumable upload, one chunk after another), and large writes reach it
        ``WRITE_CHUNK`` at a time, so a save holds a few parts in memory, not the serialized payload. An upload that
        fails is abandoned, where the filesystem can (an object left behind is in a folder no manifest commits, and
        is removed with it)."""
        path = f"{staging}/{name}"
        fh = parts.PartUpload(self.fs, path) if parts.can_upload_in_parts(self.fs) else self.fs.open(path, "wb")
        try:
            with ThreadPoolExecutor(1, "spotrun-hash") as hasher:
                hashing = _HashingWriter(fh, hasher, start_writeback=False, piece_bytes=WRITE_CHUNK)
                serialize(hashing)
            fh.close()
        except BaseException:
            discard = getattr(fh, "discard", None)  # fsspec's buffered files: abort the multipart upload
            with contextlib.suppress(Exception):
                if callable(discard):
                    discard()
                else:
                    fh.close()
            raise
        return hashing.describe()

    def commit(self, staging: str, step: int, manifest: dict[str, Any]) -> None:
        self.fs.pipe_file(f"{staging}/{layout.MANIFEST_NAME}", layout.encode_manifest(manifest))

    def remove(self, path: str) -> None:
        """Delete a checkpoint folder, manifest first, so a half-deleted one is never taken as committed."""
        manifest = f"{path}/{layout.MANIFEST_NAME}"
        if self.fs.exists(manifest):
            self.fs.rm_file(manifest)
        if self.fs.exists(path):
            layout.remove_folder(self.fs, path)

    def claim(self) -> None:
        """Make this store the folder's one writer, or raise CheckpointError naming the writer that is. Not on an
        object store, which offers no lock that a writer killed with its machine would not leave behind (``writerlock``)."""

    def release(self) -> None:
        """Give up the claim: another writer may save to the folder now."""

    def clean_staging(self) -> None:
        """Leftovers of saves that died half-way; an object store has none outside the checkpoint folders."""

    def finish_commits(self) -> None:
        """Put in place the saves that died while being committed, complete; an object store commits in one write."""

    def prune(self, newest: int, keep_last: int, also_keep: Iterable[int] = (), skipped: Iterable[int] = ()) -> None:
        """Keep the ``keep_last`` newest committed checkpoints up to ``newest`` (and those of ``also_keep``);
        remove every other checkpoint folder (older ones, half-written ones, and any from an abandoned later
        timeline: newer ones, and the ``skipped`` ones a restore found damaged, which do not count as kept)."""
        damaged = set(skipped)
        older = [step for step, _ in self.committed() if step < newest and step not in damaged]
        keep = {newest, *older[::-1][: keep_last - 1], *(step for step in also_keep if step < newest)}
        for step, path in self.checkpoint_folders():
            if step not in keep:
                self.remove(path)
        self.clean_staging()


class LocalStore(CheckpointStore):
    """A local (or mounted) disk: stage in a hidden folder, fsync files and folders, rename into place."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str) -> None:
        super().__init__(fs, root)
        self._writer = WriterLock(self.root)

    def claim(self) -> None:
        if not self._writer.acquire(wait=CLAIM_WAIT_SECONDS):
            raise CheckpointError(
                f"{self.root}: another writer (a Checkpointer not closed, or a Trainer or Lightning run still "
                "training, in this process or another) is saving checkpoints to this folder; two writers would commit "
                "each other's half-written files and remove each other's checkpoints: stop that one, or give this run "
                "a location of its own"
            )

    def release(self) -> None:
        self._writer.release()

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

    @contextmanager
    def _open_for_reading(self, file: str, size: int) -> Iterator[tuple[BinaryIO, directio.DirectFile | None]]:
        with open(file, "rb", buffering=0) as fh:  # large reads straight into the tensors' memory
            with directio.open_uncached(file, fh.fileno()) as direct:
                yield fh, direct

    def write_payload(self, staging: str, name: str, serialize: Serializer) -> dict[str, Any]:
        """Stream the payload to disk, checksumming it on the way: no copy of the serialized payload is held in
        memory (a save's extra memory stays at the host snapshot it writes). Written with O_DIRECT where the
        filesystem takes it (large storages straight from the snapshot's memory, see ``directio``); else
        through the page cache, with the disk writes started while it is still being written, so that the
        closing fsync has little left to wait for."""
        path = f"{staging}/{name}"
        with open(path, "wb", buffering=0) as fh, ThreadPoolExecutor(1, "spotrun-hash") as hasher:
            with directio.open_for_writing(path, fh.fileno()) as direct:
                hashing = _HashingWriter(direct or fh, hasher, start_writeback=direct is None)
                serialize(hashing)
            os.fsync(fh.fileno())
        return hashing.describe()

    def commit(self, staging: str, step: int, manifest: dict[str, Any]) -> None:
        self.write(staging, layout.MANIFEST_NAME, layout.encode_manifest(manifest))
        _fsync_dir(staging)
        final = self.path(step)
        if os.path.exists(final) and _exchange(staging, final):  # one atomic swap: the old one is where staging was
            _fsync_dir(self.root)
            shutil.rmtree(staging, ignore_errors=True)
            return
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
        """Leftovers of saves that died half-way (see ``finish_commits`` for those that were complete); none while
        another writer holds the folder (its save may be in flight)."""
        self._unless_another_writer(self._remove_leftovers)

    def finish_commits(self) -> None:
        """A staging folder with a manifest where its checkpoint's folder is missing is a replacement cut short
        between its two renames (``commit`` on a filesystem that cannot swap folders): it is renamed into place."""
        self._unless_another_writer(self._finish_cut_commits)

    def _unless_another_writer(self, action: Callable[[], None]) -> None:
        if self._writer.held:
            action()
            return
        try:
            free = self._writer.acquire()
        except OSError:  # no folder, or one this process may not write to: nothing it could change either
            return
        if not free:
            log.info("%s: another writer is saving here; its staging folders are left alone", self.root)
            return
        try:
            action()
        finally:
            self._writer.release()

    def _remove_leftovers(self) -> None:
        self._finish_cut_commits()
        for name in _names_in(self.root):
            if name.startswith((STAGING_PREFIX, TRASH_PREFIX)):
                shutil.rmtree(f"{self.root}/{name}", ignore_errors=True)

    def _finish_cut_commits(self) -> None:
        for name in _names_in(self.root):
            final = f"{self.root}/{name.removeprefix(STAGING_PREFIX)}"
            if not name.startswith(STAGING_PREFIX) or layout.parse_step(final) is None or os.path.exists(final):
                continue
            if layout.read_manifest(self.fs, f"{self.root}/{name}") is not None:
                os.rename(f"{self.root}/{name}", final)
                _fsync_dir(self.root)

    def _trash_path(self, path: str) -> str:
        return f"{self.root}/{TRASH_PREFIX}{os.path.basename(path)}-{uuid.uuid4().hex[:8]}"


class _HashingWriter:
    """A write-only file that writes what it is given to a raw file and computes its size and checksum. A
    large chunk is hashed in a helper thread while it is written (the hash and file writes both release the
    GIL), in pieces whose writeback to the disk is started at once (``start_writeback``, for a file written
    through the page cache); ``write`` returns only once both are done with the chunk, since the caller may
    reuse its buffer."""

    def __init__(
        self,
        raw: io.RawIOBase | directio.DirectWriter | BinaryIO,
        hasher: ThreadPoolExecutor,
        start_writeback: bool = True,
        piece_bytes: int | None = None,
    ) -> None:
        self._raw = raw
        self._hasher = hasher
        self._start_writeback = start_writeback
        self._piece_bytes = WRITE_CHUNK if start_writeback else piece_bytes  # None: a large chunk in one write
        self._checksum = layout.CHECKSUMS[layout.CHECKSUM]()
        self._size = 0

    def write(self, data: Any) -> int:
        chunk = memoryview(data).cast("B")
        if chunk.nbytes < HASH_IN_PARALLEL_BYTES:
            self._checksum.update(chunk)
            self._write_all(chunk)
            return chunk.nbytes
        hashed = threads.submit(self._hasher, self._checksum.update, chunk)
        try:
            step = self._piece_bytes or chunk.nbytes
            for offset in range(0, chunk.nbytes, step):
                piece = chunk[offset : offset + step]
                self._write_all(piece)
                if self._start_writeback:
                    _start_writeback(self._raw.fileno(), self._size - piece.nbytes, piece.nbytes)
        finally:
            hashed.result()
        return chunk.nbytes

    def _write_all(self, chunk: memoryview) -> None:
        written = 0
        while written < chunk.nbytes:
            written += self._raw.write(chunk[written:]) or 0
        self._size += written

    def flush(self) -> None:
        self._raw.flush()

    def describe(self) -> dict[str, Any]:
        return {"size": self._size, layout.CHECKSUM: self._checksum.hexdigest()}


class _OverlappedHash:
    """A checksum computed in a helper thread, chunk after chunk in the order given, while the caller reads
    on; ``describe`` (after the ``with`` block) waits for it. Chunks must not change once given."""

    def __init__(self, algorithm: str) -> None:
        self._algorithm = algorithm
        self._checksum = layout.CHECKSUMS[algorithm]()
        self._size = 0
        self._pending: Future[None] | None = None
        self._thread = ThreadPoolExecutor(1, "spotrun-hash")

    def update(self, chunk: memoryview) -> None:
        self._size += chunk.nbytes
        if chunk.nbytes < HASH_IN_PARALLEL_BYTES and (self._pending is None or self._pending.done()):
            self._checksum.update(chunk)
        else:
            self._pending = threads.submit(self._thread, self._checksum.update, chunk)

    def __enter__(self) -> _OverlappedHash:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._thread.shutdown(wait=True)

    def describe(self) -> dict[str, Any]:
        if self._pending is not None:
            self._pending.result()
        return {"size": self._size, self._algorithm: self._checksum.hexdigest()}


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's sync_file_range (not in Python's os module), or None elsewhere."""
    return libc.function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))


_SYNC_FILE_RANGE = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range of the file to the disk now, without waiting for it: the
    final fsync then finds most of the file already written. Durability still rests on that fsync."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


_RENAMEAT2 = libc.function("renameat2", (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint))
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(first: str, second: str) -> bool:
    """Swap two existing paths in one atomic step (Linux's renameat2 with RENAME_EXCHANGE); False where that is not
    offered (another OS, an old kernel or C library, a filesystem without it), and nothing was changed. Two renames
    in a row (the old folder aside, the new one in) leave a moment with neither in place: a save killed then lost
    both, as a restore removes staging and trash folders."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), second)


def _names_in(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


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
        fs, root = url_to_fs(location, storage_options)
    else:
        root = fs._strip_protocol(location)
    if isinstance(fs, LocalFileSystem):
        if os.path.isfile(root):  # makedirs says only "File exists"
            raise NotADirectoryError(f"checkpoint location {root} is a file: give a folder (or one to create)")
        os.makedirs(root, exist_ok=True)
        return LocalStore(fs, root)
    return CheckpointStore(fs, root)
