"""Reading the large tensor storages of a local payload file with O_DIRECT: the disk writes the bytes straight
into the tensors' memory (DMA), with no copy out of the page cache.

That copy is most of a buffered read's CPU time (measured here: 0.2-0.7 s per GiB on a busy 2-vCPU VM, where a
restore is bound by CPU), and a restore reads each byte once, so the page cache buys nothing. O_DIRECT wants the
file offset, the length and the memory address aligned to the disk's block size; storages sit at 64-byte
offsets in the file, so each one gets its own page-aligned anonymous mapping that mirrors the file around it:
the mapping starts at the aligned block before the storage's first byte, and the storage is the part of it at
the same offset within the page (``torch.frombuffer``). The few surrounding bytes read along with it belong to
the header, a padding, or a neighbouring storage; they are neither used nor checksummed from there. Such a
storage cannot be resized (as with ``torch.load(mmap=True)``); its memory is unmapped when its last tensor goes.

Used only where it helps and works: Linux with O_DIRECT, a filesystem that accepts it, and a file that is not
already in the page cache (then a buffered read is a memory copy, faster than the disk). A direct read the
filesystem refuses falls back to a buffered read of the same bytes.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

BLOCK = 4096  # the largest logical block size in common use (512 and 4096): aligning to it suits both
MIN_BYTES = 1 << 20  # smaller storages are read the ordinary way: a mapping each is not worth it


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
        end = -(-(offset + length) // BLOCK) * BLOCK
        memory = mmap.mmap(-1, max(end - start, BLOCK), flags=mmap.MAP_PRIVATE)  # not MAP_SHARED: that is shmem
        if hasattr(mmap, "MADV_HUGEPAGE"):
            memory.madvise(mmap.MADV_HUGEPAGE)  # see hostmem: 512 times fewer page faults
        return Region(start, memory)

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
    left = -(-left // BLOCK) * BLOCK
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
    """Whether the middle of the file is in the page cache, asked without waiting for the disk (RWF_NOWAIT).
    A file is normally cached whole or not at all: just written or read, or dropped or never read."""
    if not hasattr(os, "RWF_NOWAIT"):
        return False
    try:
        return os.preadv(fd, [bytearray(1)], os.fstat(fd).st_size // 2, os.RWF_NOWAIT) == 1
    except BlockingIOError:
        return False
    except OSError:  # RWF_NOWAIT not supported here: we cannot tell
        return False


def storage_tensor(region: Region, offset: int, nbytes: int) -> torch.Tensor:
    """A uint8 tensor over the file's bytes ``[offset, offset + nbytes)`` in ``region``; it keeps the region's
    memory alive for as long as it (or any tensor on its storage) lives."""
    return torch.frombuffer(region.memory, dtype=torch.uint8, count=nbytes, offset=offset - region.start)
