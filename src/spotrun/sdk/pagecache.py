"""Which of a file's pages are in the page cache, asked with mincore on a read-only mapping of them.

Unlike a read, mincore starts no I/O. A read with RWF_NOWAIT (what restore asked before) is no such probe: on a
miss it starts reading the page, and on a fast disk (a VM's virtio disk backed by the host's cache) that read
can finish before the call looks again, so the call returns the byte and the file looks cached when it was not
(Linux 6.18, ext4: about one call in ten just after the file was dropped from the cache).
"""

from __future__ import annotations

import ctypes
import mmap
import os

from spotrun import libc

_PAGE = mmap.PAGESIZE
_FAILED = ctypes.c_void_p(-1).value
# libc's own mmap, since Python's gives no address of a read-only mapping to ask mincore about
_MMAP = libc.function(
    "mmap", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long), ctypes.c_void_p,
)
_MINCORE = libc.function("mincore", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p))
_MUNMAP = libc.function("munmap", (ctypes.c_void_p, ctypes.c_size_t))


def resident_pages(fd: int, offset: int = 0, length: int | None = None) -> int | None:
    """How many pages of the file's bytes ``[offset, offset + length)`` (default: to its end) are in the page
    cache; None where this cannot be asked (not Linux, or the kernel refused the mapping)."""
    if _MMAP is None or _MINCORE is None or _MUNMAP is None:
        return None
    size = os.fstat(fd).st_size
    start = min(offset, size) // _PAGE * _PAGE
    end = size if length is None else min(offset + length, size)
    if end <= start:
        return 0
    address = _MMAP(None, end - start, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if address in (None, _FAILED):
        return None
    try:
        pages = ctypes.create_string_buffer(-(-(end - start) // _PAGE))
        if _MINCORE(address, end - start, pages) != 0:
            return None
        return sum(byte & 1 for byte in pages.raw)
    finally:
        _MUNMAP(address, end - start)
