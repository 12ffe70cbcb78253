"""Host snapshots of the training state: the only part of a save that blocks training.

A snapshot is a deep copy whose tensors live in host memory, so that training can go on while the copy is written.
An earlier snapshot that nothing reads any more lends its tensors where the structure, shape, dtype and strides
match: copying into memory that is already mapped is several times faster than allocating it anew (page faults).
A large contiguous tensor seen for the first time gets page-aligned memory, from which the payload file can be
written with O_DIRECT (``directio``).

Contiguous CPU tensors are copied with plain memory copies split over ``COPY_THREADS`` threads (torch's ``copy_``
ran 1.3-1.6x slower here for the same bytes), in the order the payload file writes them, and a writer may start on
a storage as soon as its copy is done (``SnapshotCopies.wait_for``): the disk writes overlap the copy instead of
following it.
"""

from __future__ import annotations

import copy
import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from spotrun.sdk import directio
from spotrun.sdk.hostmem import page_aligned_bytes

COPY_THREADS = 2  # the snapshot copy is bound by memory bandwidth, which one thread does not fill here
_SPLIT_BYTES = 4 << 20  # smaller tensors are copied whole by one thread


def snapshot_to_host(value: Any, reuse: Any = None) -> Any:
    """A host snapshot of ``value`` (``reuse``: an earlier snapshot of it that lends its memory), copied at once."""
    copies = SnapshotCopies()
    snapshot = copies.snapshot(value, reuse)
    copies.run()
    return snapshot


class SnapshotCopies:
    """The memory copies of one or more snapshots: listed while their structure is built (``snapshot``), then run
    by the caller with helper threads (``run``); a writer in another thread waits for each storage's copy before
    it reads it (``wait_for``)."""

    def __init__(self) -> None:
        # (target, source, length, target storage) moves per thread, and per target storage the moves not done yet
        self._lanes: list[list[tuple[int, int, int, int]]] = [[] for _ in range(COPY_THREADS)]
        self._tensors: list[tuple[torch.Tensor, torch.Tensor]] = []  # the moves' memory, kept alive until ``run``
        self._left: dict[int, int] = {}
        self._changed = threading.Condition()
        self._failure: BaseException | None = None

    def snapshot(self, value: Any, reuse: Any = None) -> Any:
        """The snapshot's structure; its contiguous CPU tensors hold their values once ``run`` has copied them.
        Their copies count as not done from here on, so a writer started before ``run`` waits for them."""
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        structure = _snapshot(value, reuse, copies)
        for target, source in copies:
            self._plan(target, source)
            self._tensors.append((target, source))
        return structure

    def run(self) -> None:
        """Make every listed copy, in order, split over ``COPY_THREADS`` threads (ctypes calls release the GIL)."""
        lanes = self._lanes
        if not any(lanes):
            return
        try:
            with ThreadPoolExecutor(COPY_THREADS - 1, thread_name_prefix="spotrun-snapshot") as helpers:
                done = [helpers.submit(self._copy_all, lane) for lane in lanes[1:]]
                self._copy_all(lanes[0])
                for future in done:
                    future.result()
        except BaseException as error:
            with self._changed:
                self._failure = error
                self._changed.notify_all()
            raise
        finally:
            self._tensors.clear()  # the sources are the live training state: do not hold them past the copy

    def wait_for(self, storage: torch.UntypedStorage) -> None:
        """Return once the copy into ``storage`` is done (at once for a storage with no copy listed); raise
        RuntimeError if the copies failed."""
        with self._changed:
            while self._left.get(storage.data_ptr(), 0) and self._failure is None:
                self._changed.wait()
            if self._failure is not None:
                raise RuntimeError(f"the snapshot copy failed: {self._failure!r}")

    def _plan(self, target: torch.Tensor, source: torch.Tensor) -> None:
        """Deal one copy's moves to the threads: a large copy cut into ``COPY_THREADS`` slices copied side by side,
        small ones dealt round."""
        nbytes = source.numel() * source.element_size()
        storage = target.untyped_storage().data_ptr()
        step = max(nbytes if nbytes < _SPLIT_BYTES else -(-nbytes // COPY_THREADS), 1)
        for lane, offset in enumerate(range(0, nbytes, step), start=len(self._tensors)):
            move = (target.data_ptr() + offset, source.data_ptr() + offset, min(step, nbytes - offset), storage)
            self._lanes[lane % COPY_THREADS].append(move)
            self._left[storage] = self._left.get(storage, 0) + 1

    def _copy_all(self, moves: list[tuple[int, int, int, int]]) -> None:
        for target, source, length, storage in moves:
            ctypes.memmove(target, source, length)
            with self._changed:
                self._left[storage] -= 1
                if not self._left[storage]:
                    self._changed.notify_all()


def _snapshot(value: Any, reuse: Any, copies: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """``snapshot_to_host`` except that contiguous CPU copies into reused tensors are only listed in ``copies``."""
    if isinstance(value, torch.Tensor):
        source = value.detach()
        if not _fits(reuse, source):
            reuse = _page_aligned_like(source)
            if reuse is None:
                return source.to("cpu", copy=True)
        if _memmovable(reuse, source):
            copies.append((reuse, source))
            return reuse
        return reuse.copy_(source)
    if isinstance(value, dict):
        copied = copy.copy(value)  # keeps the dict's type and attributes (a state_dict's _metadata)
        earlier = reuse if isinstance(reuse, dict) else {}
        for key, item in copied.items():
            copied[key] = _snapshot(item, earlier.get(key), copies)
        return copied
    if isinstance(value, list):
        return [_snapshot(item, _nth(reuse, list, index), copies) for index, item in enumerate(value)]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_snapshot(item, _nth(reuse, tuple, index), copies) for index, item in enumerate(value))
    return copy.deepcopy(value)


def _page_aligned_like(tensor: torch.Tensor) -> torch.Tensor | None:
    """Empty host memory for a copy of a large contiguous tensor, page-aligned so that the checkpoint file can
    be written from it with O_DIRECT (no copy into the page cache); None for any other tensor."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes < directio.MIN_BYTES or tensor.layout != torch.strided or tensor.is_quantized:
        return None
    if not tensor.is_contiguous():
        return None
    return page_aligned_bytes(nbytes).view(tensor.dtype).view(tensor.shape)


def _fits(host: Any, tensor: torch.Tensor) -> bool:
    return (
        isinstance(host, torch.Tensor)
        and host.device.type == "cpu"
        and host.layout == tensor.layout == torch.strided
        and host.dtype == tensor.dtype
        and host.shape == tensor.shape
        and host.stride() == tensor.stride()
    )


def _memmovable(target: torch.Tensor, source: torch.Tensor) -> bool:
    """Whether ``source``'s memory, copied byte for byte, is ``target.copy_(source)`` (given ``_fits``)."""
    return all(
        tensor.device.type == "cpu"
        and tensor.is_contiguous()
        and not (tensor.is_conj() or tensor.is_neg() or tensor.is_quantized)
        for tensor in (target, source)
    )


def _nth(container: Any, kind: type, index: int) -> Any:
    return container[index] if isinstance(container, kind) and index < len(container) else None
