"""spotrun.libc: C library functions typed per caller, or None where they are missing."""

import ctypes
import sys

import pytest

from spotrun import libc


def test_a_function_libc_lacks_is_none():
    assert libc.function("spotrun_no_such_function", ()) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_each_caller_gets_its_own_typing():
    as_pointer = libc.function("mmap", (ctypes.c_void_p,) * 2 + (ctypes.c_int,) * 3 + (ctypes.c_long,), ctypes.c_void_p)
    as_int = libc.function("mmap", (), ctypes.c_int)
    assert as_pointer is not as_int and as_pointer.restype is ctypes.c_void_p and as_int.restype is ctypes.c_int
