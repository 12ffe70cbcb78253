"""Host memory for tensors that are about to be filled from a file: backed by transparent huge pages where
the kernel offers them (Linux with THP "madvise" or "always"), and faulted in by helper threads ahead of the
thread that fills it.

A restore writes every byte of a fresh allocation once, and the first write to each page is a page fault:
a trap, a page zeroed by the kernel, and in a VM often a fault on the host too (memory the guest freed is
handed back to the host, which must map it again). With 4 KiB pages that cost 0.7-1 s of kernel time per GiB
on a 2-vCPU VM, more than reading the same bytes from the disk; with 2 MiB pages there are 512 times fewer
faults, and faulting the pages in ahead of the reader, from other threads, takes the rest off its path
(``MADV_POPULATE_WRITE``, Linux 5.14+, which maps zeroed pages and never changes a page already there). The
tensors hold the same bytes either way; where none of this is offered they are plain ``torch.empty`` memory.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

from spotrun import libc

HUGE_PAGE = 2 << 20
MIN_HUGE_BYTES = 2 * HUGE_PAGE  # below this a tensor holds at most one whole huge page: not worth a syscall
PREFAULT_THREADS = 2
PREFAULT_STEP = 16 << 20  # each helper faults this much at a time, so they stay a few steps ahead of the reader
PREFAULT_MIN_BYTES = 64 << 20  # below this the helper threads cost more than they save
_PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23  # Linux's value; not in Python's mmap module before 3.13


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's madvise on any address (Python's mmap.madvise covers only its own mappings), or None."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    return libc.function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))


_MADVISE = _libc_madvise()


def empty_bytes(nbytes: int) -> torch.Tensor:
    """``torch.empty(nbytes, dtype=torch.uint8)`` whose whole 2 MiB pages are marked for huge pages before
    anything touches them. Only the pages lying wholly inside the tensor are marked, so no neighbouring
    allocation is affected; a refusal by the kernel (THP off, an old kernel) leaves ordinary pages."""
    tensor = torch.empty(nbytes, dtype=torch.uint8)
    if _MADVISE is not None and nbytes >= MIN_HUGE_BYTES:
        start = -(-tensor.data_ptr() // HUGE_PAGE) * HUGE_PAGE
        end = (tensor.data_ptr() + nbytes) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            _MADVISE(start, end - start, mmap.MADV_HUGEPAGE)
    return tensor


def mapping(nbytes: int) -> mmap.mmap:
    """A page-aligned anonymous mapping of ``nbytes`` (at least one byte) of its own, advised to use huge pages when
    it can hold one: memory a file is read into or written from with O_DIRECT (``directio``)."""
    memory = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE)  # not MAP_SHARED: that is shmem
    if hasattr(mmap, "MADV_HUGEPAGE") and nbytes >= MIN_HUGE_BYTES:
        memory.madvise(mmap.MADV_HUGEPAGE)
    return memory


def page_aligned_bytes(nbytes: int) -> torch.Tensor:
    """A uint8 tensor of ``nbytes`` at the start of a ``mapping`` of its own, so that a file can be written from it
    with O_DIRECT (``directio.DirectWriter``). The mapping is unmapped when its last tensor goes."""
    return torch.frombuffer(mapping(nbytes), dtype=torch.uint8, count=nbytes)


@contextmanager
def prefaulted(tensors: Sequence[torch.Tensor]) -> Iterator[None]:
    """While the block runs, ``PREFAULT_THREADS`` helper threads fault in the pages of ``tensors`` (CPU tensors
    with memory not yet used), in order, so that the block's writes find them mapped. The helpers stop when the
    block ends, whether or not they are done; a kernel without ``MADV_POPULATE_WRITE`` just leaves the pages to
    be faulted by the writer."""
    if _MADVISE is None or sum(tensor.nbytes for tensor in tensors) < PREFAULT_MIN_BYTES:
        yield
        return
    stop = threading.Event()
    helpers = _start_helpers(tensors, stop)
    try:
        yield
    finally:
        stop.set()
        for helper in helpers:
            helper.join()


def fault_in(tensors: Sequence[torch.Tensor]) -> None:
    """Fault in every page of ``tensors`` as ``prefaulted``'s helpers do, and wait until they are done (the
    benchmark measures with it what fresh memory costs on the machine)."""
    if _MADVISE is None:
        return
    for helper in _start_helpers(tensors, threading.Event()):
        helper.join()


def _start_helpers(tensors: Sequence[torch.Tensor], stop: threading.Event) -> list[threading.Thread]:
    pieces = iter(_prefault_pieces(tensors))
    handing_out = threading.Lock()

    def fault_pieces() -> None:
        while not stop.is_set():
            with handing_out:
                piece = next(pieces, None)
            if piece is None or _MADVISE(piece[0], piece[1], _MADV_POPULATE_WRITE) != 0:
                return  # done, or not supported here (EINVAL): the writer faults the rest

    helpers = [threading.Thread(target=fault_pieces, name="spotrun-prefault", daemon=True) for _ in range(PREFAULT_THREADS)]
    for helper in helpers:
        helper.start()
    return helpers


def _prefault_pieces(tensors: Sequence[torch.Tensor]) -> Iterator[tuple[int, int]]:
    """(address, length) of the whole pages inside each tensor, ``PREFAULT_STEP`` at a time: pages shared with
    a neighbouring allocation are left alone."""
    for tensor in tensors:
        start = -(-tensor.data_ptr() // _PAGE) * _PAGE
        end = (tensor.data_ptr() + tensor.nbytes) // _PAGE * _PAGE
        for offset in range(start, end, PREFAULT_STEP):
            yield offset, min(PREFAULT_STEP, end - offset)
