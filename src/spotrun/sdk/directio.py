"""Reading and writing local payload files with O_DIRECT: the disk moves a large storage's bytes straight
between the tensors' memory and the disk (DMA), with no copy through the page cache.

Writing (``DirectWriter``): a save writes each byte once and nothing reads it back soon, so copying it into
the page cache (fresh pages: page faults, and the cache evicts what training reads) buys nothing. Payload files
place large storages on block boundaries (``tensorfile``) and snapshots keep them in page-aligned memory
(``hostmem.page_aligned_bytes``), so those go to the disk from where they are; the header, small storages and
paddings are gathered in an aligned buffer and written a block at a time.

Reading (``DirectFile``): copying out of the page cache is most of a buffered read's CPU time (measured here:
0.2-0.7 s per GiB on a busy 2-vCPU VM, where a restore is bound by CPU), and a restore reads each byte once, so
the page cache buys nothing. O_DIRECT wants the file offset, the length and the memory address aligned to the
disk's block size; a storage may sit at any 64-byte offset (version 1 files), so each one gets its own
page-aligned anonymous mapping that mirrors the file around it: the mapping starts at the aligned block before
the storage's first byte, and the storage is the part of it at the same offset within the page
(``torch.frombuffer``). The few surrounding bytes read along with it belong to the header, a padding, or a
neighbouring storage; they are neither used nor checksummed from there. Such a storage cannot be resized (as
with ``torch.load(mmap=True)``); its memory is unmapped when its last tensor goes.

Direct reads are used only where they help and work: Linux with O_DIRECT, a filesystem that accepts it, and a
file that is not already in the page cache (then a buffered read is a memory copy, faster than the disk). A
direct read the filesystem refuses falls back to a buffered read of the same bytes.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from spotrun.sdk import hostmem, pagecache

BLOCK = 4096  # the largest logical block size in common use (512 and 4096): aligning to it suits both
MIN_BYTES = 1 << 20  # smaller storages are read the ordinary way: a mapping each is not worth it
GATHER_BYTES = 4 << 20  # the aligned buffer that gathers small writes into whole blocks
WRITE_CHUNK = 64 << 20  # a large storage goes to the disk this much per call
REFUSED = frozenset({errno.EINVAL, errno.EOPNOTSUPP})  # how a filesystem turns down a direct write


@dataclass
class Region:
    """Memory mirroring the file's bytes ``[start, start + len(memory))``, holding one storage."""

    start: int
    memory: mmap.mmap

    def view(self, offset: int, length: int) -> memoryview:
        """The file's bytes ``[offset, offset + length)``, once read."""
        return memoryview(self.memory)[offset - self.start : offset - self.start + length]


class DirectFile:
    """An O_DIRECT descriptor of a file that is also open for ordinary reads."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.usable = True  # False once the filesystem refused a direct read

    def region(self, offset: int, length: int) -> Region:
        """Page-aligned memory for the file's bytes ``[offset, offset + length)`` and the blocks around them."""
        start = offset // BLOCK * BLOCK
        return Region(start, hostmem.mapping(max(round_up(offset + length, BLOCK) - start, BLOCK)))

    def read(self, region: Region, end: int, chunk: int) -> Iterator[int]:
        """Read the file into ``region`` from its start up to at least ``end``, ``chunk`` bytes at a time,
        yielding the file offset reached after each read. Stops early at the end of the file; OSError
        EINVAL (after which ``usable`` is False) when the filesystem refuses direct reads of these."""
        view = memoryview(region.memory)
        position = region.start
        while position < end:
            length = _next_length(end - position, chunk)
            at = position - region.start
            try:
                got = os.preadv(self._fd, [view[at : at + length]], position)
            except OSError as error:
                if error.errno == errno.EINVAL:
                    self.usable = False
                raise
            if got <= 0:
                return
            position += got
            yield position
            if got < length:  # the end of the file
                return


def _next_length(left: int, chunk: int) -> int:
    """How much to read next, in whole blocks: ``chunk``, or all that is left when that is at most a quarter
    more (a storage of 64 MiB and its padding is one read, not a second one of a block or two that would wait
    for the disk on its own)."""
    left = round_up(left, BLOCK)
    return left if left <= chunk + chunk // 4 else chunk


def prefetch(fd: int, ranges: list[tuple[int, int]]) -> None:
    """Start reading the file's ``(offset, length)`` ranges into the page cache, without waiting
    (POSIX_FADV_WILLNEED): the small storages between the large ones, so that each is a memory copy when the
    reader reaches it instead of a trip to the disk of its own. Ranges that touch are asked for together."""
    if not hasattr(os, "posix_fadvise"):
        return
    merged: list[list[int]] = []
    for offset, length in sorted(ranges):
        if merged and offset <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], offset + length)
        elif length > 0:
            merged.append([offset, offset + length])
    for start, end in merged:
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_WILLNEED)


@contextmanager
def open_uncached(path: str, fd: int) -> Iterator[DirectFile | None]:
    """A DirectFile for ``path`` (``fd``: the same file, open for ordinary reads), or None where direct reads
    are not available, would not be used (a file smaller than MIN_BYTES), or the file's bytes are already in
    the page cache."""
    if not hasattr(os, "O_DIRECT") or os.fstat(fd).st_size < MIN_BYTES or _cached(fd):
        yield None
        return
    try:
        direct_fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:  # e.g. tmpfs: EINVAL
        yield None
        return
    try:
        yield DirectFile(direct_fd)
    finally:
        os.close(direct_fd)


def _cached(fd: int) -> bool:
    """Whether the page in the middle of the file is in the page cache (`pagecache`: asked without reading it).
    A file is normally cached whole or not at all: just written or read, or dropped or never read. Where this
    cannot be asked, the file is taken as not cached and read directly."""
    return bool(pagecache.resident_pages(fd, os.fstat(fd).st_size // 2, 1))


def storage_tensor(region: Region, offset: int, nbytes: int) -> torch.Tensor:
    """A uint8 tensor over the file's bytes ``[offset, offset + nbytes)`` in ``region``; it keeps the region's
    memory alive for as long as it (or any tensor on its storage) lives."""
    return torch.frombuffer(region.memory, dtype=torch.uint8, count=nbytes, offset=offset - region.start)


class DirectWriter:
    """Writes a file front to back with O_DIRECT (``fd``, opened with it), as a raw file would (``write``),
    then ``close`` sets its length. A chunk that starts on a block boundary, in page-aligned memory, goes to
    the disk from that memory, its whole blocks at least; everything else is gathered in an aligned buffer
    and written once a whole buffer is full. Where the filesystem refuses a direct write (``REFUSED``), that write
    and all that follow go through ``fallback``, an ordinary descriptor of the same file, from the same
    offset: no block is written partly one way and partly the other."""

    def __init__(self, fd: int, fallback: int) -> None:
        self._fd = fd
        self._fallback = fallback
        self.usable = True
        self._gathered = hostmem.mapping(GATHER_BYTES)
        self._gathered_bytes = 0
        self._start = 0  # file offset of the gathered bytes (always a block boundary)

    @property
    def position(self) -> int:
        return self._start + self._gathered_bytes

    def write(self, data: object) -> int:
        chunk = memoryview(data).cast("B")  # type: ignore[arg-type]
        total = chunk.nbytes
        if self.position % BLOCK == 0 and chunk.nbytes >= BLOCK and _address(chunk) % BLOCK == 0:
            self._flush_gathered()
            whole = chunk.nbytes // BLOCK * BLOCK
            for offset in range(0, whole, WRITE_CHUNK):
                self._write_at(chunk[offset : min(offset + WRITE_CHUNK, whole)], self._start)
                self._start += min(WRITE_CHUNK, whole - offset)
            chunk = chunk[whole:]
        while chunk.nbytes:
            taken = min(chunk.nbytes, GATHER_BYTES - self._gathered_bytes)
            self._gathered[self._gathered_bytes : self._gathered_bytes + taken] = chunk[:taken]
            self._gathered_bytes += taken
            chunk = chunk[taken:]
            if self._gathered_bytes == GATHER_BYTES:
                self._flush_gathered()
        return total

    def flush(self) -> None:
        """Nothing to do: gathered bytes wait for a whole buffer (or ``close``), as O_DIRECT wants whole blocks."""

    def close(self) -> None:
        """Write what is gathered (its last block zero-filled past the end), then cut the file to its length."""
        end = self.position
        if self._gathered_bytes:
            whole = round_up(self._gathered_bytes, BLOCK)
            self._gathered[self._gathered_bytes : whole] = bytes(whole - self._gathered_bytes)
            self._write_at(memoryview(self._gathered)[:whole], self._start)
        os.ftruncate(self._fd, end)
        self._gathered.close()

    def _flush_gathered(self) -> None:
        """Write the gathered bytes if they are whole blocks (they are whenever the position is on a boundary)."""
        if self._gathered_bytes and self._gathered_bytes % BLOCK == 0:
            self._write_at(memoryview(self._gathered)[: self._gathered_bytes], self._start)
            self._start += self._gathered_bytes
            self._gathered_bytes = 0

    def _write_at(self, chunk: memoryview, offset: int) -> None:
        written = 0
        while written < chunk.nbytes:
            if self.usable:
                try:
                    written += os.pwritev(self._fd, [chunk[written:]], offset + written)
                    continue
                except OSError as error:
                    if error.errno not in REFUSED:
                        raise
                    self.usable = False
            written += os.pwrite(self._fallback, chunk[written:], offset + written)


def round_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _address(chunk: memoryview) -> int:
    return int(np.frombuffer(chunk, dtype=np.uint8).ctypes.data) if chunk.nbytes else 0


@contextmanager
def open_for_writing(path: str, fallback: int) -> Iterator[DirectWriter | None]:
    """A DirectWriter for the file at ``path`` (``fallback``: the same file, open for ordinary writes), or
    None where direct writes are not available (no O_DIRECT here, or a filesystem that refuses it).
    The writer is closed (its length set) when the block ends without an error."""
    if not hasattr(os, "O_DIRECT"):
        yield None
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        yield None
        return
    try:
        writer = DirectWriter(fd, fallback)
        yield writer
        writer.close()
    finally:
        os.close(fd)
