"""C library calls that Python's os and mmap modules do not offer (madvise on any address, mincore,
sync_file_range, mallopt, prctl), typed, or None where the platform lacks them."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any


@cache
def _library() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def function(name: str, argtypes: Sequence[Any], restype: Any = ctypes.c_int) -> Callable[..., Any] | None:
    """libc's `name` with its argument and result types set, or None off Linux or where libc lacks it."""
    library = _library()
    if library is None:
        return None
    try:
        found = library[name]  # a function object of its own, typed for this caller only
    except AttributeError:
        return None
    found.argtypes, found.restype = tuple(argtypes), restype
    return found  # type: ignore[no-any-return]
