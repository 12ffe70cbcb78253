"""Which of a file's pages are in the page cache, asked with mincore on a read-only mapping of them.

Unlike a read, mincore starts no I/O. A read with RWF_NOWAIT (what restore asked before) is no such probe: on a
miss it starts reading the page, and on a fast disk (a VM's virtio disk backed by the host's cache) that read
can finish before the call looks again, so the call returns the byte and the file looks cached when it was not
(Linux 6.18, ext4: about one call in ten just after the file was dropped from the cache).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from typing import Any

_PAGE = mmap.PAGESIZE
_FAILED = ctypes.c_void_p(-1).value


def _libc() -> Any | None:
    """libc with mmap, mincore and munmap typed for any address (Python's mmap gives no address of a read-only
    mapping), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def resident_pages(fd: int, offset: int = 0, length: int | None = None) -> int | None:
    """How many pages of the file's bytes ``[offset, offset + length)`` (default: to its end) are in the page
    cache; None where this cannot be asked (not Linux, or the kernel refused the mapping)."""
    size = os.fstat(fd).st_size
    start = min(offset, size) // _PAGE * _PAGE
    end = size if length is None else min(offset + length, size)
    if _LIBC is None:
        return None
    if end <= start:
        return 0
    address = _LIBC.mmap(None, end - start, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if address in (None, _FAILED):
        return None
    try:
        pages = ctypes.create_string_buffer(-(-(end - start) // _PAGE))
        if _LIBC.mincore(address, end - start, pages) != 0:
            return None
        return sum(byte & 1 for byte in pages.raw)
    finally:
        _LIBC.munmap(address, end - start)
