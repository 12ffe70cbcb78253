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

Tensors of the state that view one storage (tied weights, a view saved next to its base) are copied once, as the
span of that storage they cover, and become views of that one copy again: the payload file writes it once
(``tensorfile``), and a restore that hands back the loaded tensors (a user dict's new key) shares it as the live state
did, as ``torch.load`` would. An earlier snapshot's storage is lent to one tensor (or one such span) only.
"""

from __future__ import annotations

import copy
import ctypes
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from spotrun.sdk import directio
from spotrun.sdk.hostmem import page_aligned_bytes

COPY_THREADS = 2  # the snapshot copy is bound by memory bandwidth, which one thread does not fill here
_SPLIT_BYTES = 4 << 20  # smaller tensors are copied whole by one thread
_WIDEST_ELEMENT = 16  # bytes (complex128): a span starting on a multiple of it starts on a whole element of each view

_StorageKey = tuple[torch.device, int]


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
        self._lent: set[int] = set()  # the earlier snapshots' storages these copies go into, each taken once

    def snapshot(self, value: Any, reuse: Any = None) -> Any:
        """The snapshot's structure; its contiguous CPU tensors hold their values once ``run`` has copied them.
        Their copies count as not done from here on, so a writer started before ``run`` waits for them."""
        build = _Build(spans=_shared_spans(value), lent=self._lent)
        structure = _snapshot(value, reuse, build)
        for target, source in build.copies:
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


@dataclass
class _Span:
    """The bytes ``[start, end)`` of a storage several tensors of a snapshot view, and its host copy once made."""

    start: int
    end: int
    host: torch.Tensor | None = None  # uint8


@dataclass
class _Build:
    """What building one snapshot keeps track of: the copies into reused memory it lists, the storages several of
    its tensors view, and the earlier snapshots' storages already taken."""

    spans: dict[_StorageKey, _Span]
    lent: set[int]
    copies: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def lend(self, earlier: torch.Tensor) -> bool:
        """Take ``earlier``'s storage for this snapshot; False where a tensor of it has it already."""
        address = earlier.untyped_storage().data_ptr()
        if address in self.lent:
            return False
        self.lent.add(address)
        return True


def _snapshot(value: Any, reuse: Any, build: _Build) -> Any:
    """``snapshot_to_host`` except that contiguous CPU copies into reused tensors are only listed in ``build``."""
    if isinstance(value, torch.Tensor):
        source = value.detach()
        span = build.spans.get(_storage_key(source))  # type: ignore[arg-type]
        if span is not None:
            return _view_of_shared_copy(source, span, reuse, build)
        if not (_fits(reuse, source) and _whole_storage(reuse) and build.lend(reuse)):
            reuse = _page_aligned_like(source)
            if reuse is None:
                return source.to("cpu", copy=True)
        if _memmovable(reuse, source):
            build.copies.append((reuse, source))
            return reuse
        return reuse.copy_(source)
    if isinstance(value, dict):
        copied = copy.copy(value)  # keeps the dict's type and attributes (a state_dict's _metadata)
        earlier = reuse if isinstance(reuse, dict) else {}
        for key, item in copied.items():
            copied[key] = _snapshot(item, earlier.get(key), build)
        return copied
    if isinstance(value, list):
        return [_snapshot(item, _nth(reuse, list, index), build) for index, item in enumerate(value)]
    if _is_plain_tuple(value):
        return tuple(_snapshot(item, _nth(reuse, tuple, index), build) for index, item in enumerate(value))
    return copy.deepcopy(value)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors ``_snapshot`` copies one by one, once per place they are held."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list) or _is_plain_tuple(value):
        for item in value:
            yield from _tensors(item)


def _is_plain_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and not hasattr(value, "_fields")  # a named tuple is deep-copied whole


def _storage_key(tensor: torch.Tensor) -> _StorageKey | None:
    """The storage a plain tensor views, which another one of the state may view too; None for any other tensor."""
    if (
        type(tensor) not in (torch.Tensor, torch.nn.Parameter)
        or tensor.layout != torch.strided
        or tensor.device.type == "meta"
        or tensor.numel() == 0
        or tensor.is_quantized
        or tensor.is_conj()
        or tensor.is_neg()
    ):
        return None
    return tensor.device, tensor.untyped_storage().data_ptr()


def _shared_spans(value: Any) -> dict[_StorageKey, _Span]:
    """The storages that several tensors of ``value`` view, each with the span of its bytes they cover."""
    spans: dict[_StorageKey, _Span] = {}
    views: Counter[_StorageKey] = Counter()
    for tensor in _tensors(value):
        key = _storage_key(tensor)
        if key is None:
            continue
        start, end = byte_range(tensor)
        views[key] += 1
        span = spans.get(key)
        spans[key] = _Span(start, end) if span is None else _Span(min(span.start, start), max(span.end, end))
    return {key: span for key, span in spans.items() if views[key] > 1}


def byte_range(tensor: torch.Tensor) -> tuple[int, int]:
    """The bytes of its storage a (non-empty) tensor spans: from its first element's, rounded down to a multiple of
    ``_WIDEST_ELEMENT``, to the end of its last element."""
    size = tensor.element_size()
    last = tensor.storage_offset() + sum((length - 1) * stride for length, stride in zip(tensor.shape, tensor.stride()))
    start = tensor.storage_offset() * size
    return start - start % _WIDEST_ELEMENT, (last + 1) * size


def _view_of_shared_copy(source: torch.Tensor, span: _Span, reuse: Any, build: _Build) -> torch.Tensor:
    """``source`` as a view of the one host copy of the span of its storage that the state's tensors share."""
    if span.host is None:
        span.host = _copy_of_span(source.untyped_storage(), span, reuse, build)
    offset = (source.storage_offset() * source.element_size() - span.start) // source.element_size()
    return torch.empty(0, dtype=source.dtype).set_(span.host.untyped_storage(), offset, source.shape, source.stride())


def _copy_of_span(storage: torch.UntypedStorage, span: _Span, reuse: Any, build: _Build) -> torch.Tensor:
    """A host copy (uint8) of the span's bytes: into the storage of ``reuse`` where it is free and of that size."""
    length = span.end - span.start
    source = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, span.start, (length,))
    target = _lent_bytes(reuse, source.numel(), build)
    if target is None:
        target = _page_aligned_like(source)
    if target is None:
        target = torch.empty(source.numel(), dtype=torch.uint8)
    if _memmovable(target, source):
        build.copies.append((target, source))
        return target
    return target.copy_(source)


def _lent_bytes(earlier: Any, nbytes: int, build: _Build) -> torch.Tensor | None:
    """The whole storage of the earlier snapshot's ``earlier`` as uint8, where it is ``nbytes`` and not taken yet."""
    if not (isinstance(earlier, torch.Tensor) and earlier.device.type == "cpu" and earlier.layout == torch.strided):
        return None
    storage = earlier.untyped_storage()
    if earlier.is_quantized or storage.nbytes() != nbytes or not build.lend(earlier):
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,))


def _whole_storage(tensor: torch.Tensor) -> bool:
    """Whether the tensor is all of its storage: an earlier snapshot's view of a shared copy is not lent to one
    tensor (the payload file would write the whole copy for it)."""
    return tensor.storage_offset() == 0 and tensor.untyped_storage().nbytes() == tensor.nbytes


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
