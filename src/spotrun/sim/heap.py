"""Simulation processes keep the heap memory they free, instead of handing it back to the kernel.

glibc returns freed memory at the top of its heap to the kernel once more than 128 KiB of it is free. An omniscient
run plans ~25 MB of value rows (a 70 h job's, in rows of ~60 KB) and frees them all when the run ends, so every run
faulted the same memory in again, page by page: a third of the omniscient runs' time in a sweep on a 2-vCPU VM
(docs/benchmarks.md, "Sweep speed"). A threshold of KEPT_BYTES keeps it for the next run. A sweep sets it in its
worker processes, or in the caller's own when it runs in one; without glibc this does nothing.
"""

from __future__ import annotations

import ctypes

from spotrun import libc

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter
KEPT_BYTES = 256 << 20


def keep_freed_memory() -> bool:
    """Raise glibc's trim threshold to KEPT_BYTES in this process; whether it was set."""
    mallopt = libc.function("mallopt", (ctypes.c_int, ctypes.c_int))
    return mallopt is not None and mallopt(M_TRIM_THRESHOLD, KEPT_BYTES) == 1
