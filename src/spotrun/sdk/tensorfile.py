"""The payload file format: a pickle of the object with its tensors' bytes kept out of the pickle, written raw.

    header  b"SPOTRUNT", version (u32), 0 (u32), storage count (u64), pickle length (u64)
    storage sizes (u64 each), the pickle, zero padding up to the first storage
    each storage's bytes, zero padding up to the next storage (or the end of the file)

Every storage starts at a multiple of 64 bytes and is padded to one; in version 2 a large storage (at least
``directio.MIN_BYTES``) starts and ends on a multiple of ``directio.BLOCK`` (4 KiB) instead, so that it can be
written and read with O_DIRECT straight from and into page-aligned memory. The file ends on a multiple of 64.
Version 1 files (all storages on 64 bytes) are still read.

Each plain CPU tensor in the object is pickled as a reference (storage number, dtype, shape, stride, offset);
its storage's bytes are written straight from the tensor's memory (no serialization copy, no CRC) and read
straight into a new tensor's memory on load (no second copy). Tensors sharing a storage share it again after
loading. Anything else (other tensor kinds included) is pickled as usual. Loading happens in two phases, so
that a checksum can be checked in between: ``read`` reads every byte of the file, passing each chunk to a
callback, and only the ``decode`` it returns unpickles. Files written by ``torch.save`` (checkpoints of SDK
versions before this format) are read the same way and decoded with ``torch.load``.

Reading allocates every storage first and has helper threads fault their pages in ahead of the reader
(``hostmem``); given a ``directio.DirectFile`` (a local file not in the page cache), large storages are read
with O_DIRECT, straight from the disk into their memory (``directio``).
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

from spotrun.sdk import directio
from spotrun.sdk.hostmem import empty_bytes, prefaulted

MAGIC = b"SPOTRUNT"
VERSION = 2
READABLE_VERSIONS = (1, 2)
_HEADER = struct.Struct("<8sIIQQ")
_SIZE = struct.Struct("<Q")
ALIGNMENT = 64
READ_CHUNK = 64 << 20

# Byte-addressable dtypes whose bytes are the values: a uint8 view of them round-trips exactly.
_RAW_DTYPES = frozenset(
    [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16]
    + [torch.float32, torch.float64, torch.complex64, torch.complex128]
    + [getattr(torch, name) for name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2") if hasattr(torch, name)]
)

ChunkSink = Callable[[memoryview], None]


class FormatError(ValueError):
    """The file is not a well-formed payload file."""


# -- writing ----------------------------------------------------------------------------------------------


def write(
    obj: Any, fh: BinaryIO, version: int = VERSION, wait_for: Callable[[torch.UntypedStorage], None] | None = None
) -> None:
    """Write ``obj`` to ``fh`` (anything with ``write``), each tensor storage in a single ``write`` call of its
    own memory (a large one, in version 2, starting at a multiple of ``directio.BLOCK`` in the file).
    ``wait_for(storage)`` is called before a storage's bytes are read: a snapshot still being copied (only the
    storages' sizes and the tensors' shapes go into the header)."""
    storages: list[torch.UntypedStorage] = []
    buffer = io.BytesIO()
    _Pickler(buffer, storages).dump(obj)
    pickled = buffer.getvalue()
    head = _HEADER.pack(MAGIC, version, 0, len(storages), len(pickled))
    head += b"".join(_SIZE.pack(storage.nbytes()) for storage in storages) + pickled
    offsets, end = placements(len(head), [storage.nbytes() for storage in storages], version)
    fh.write(head + bytes((offsets[0] if offsets else end) - len(head)))
    for storage, offset, following in zip(storages, offsets, [*offsets[1:], end]):
        if storage.nbytes():
            if wait_for is not None:
                wait_for(storage)
            fh.write(memoryview(_bytes_of(storage).numpy()))
        if following > offset + storage.nbytes():
            fh.write(bytes(following - offset - storage.nbytes()))


def placements(head_length: int, sizes: list[int], version: int) -> tuple[list[int], int]:
    """Where each storage starts in a file of ``version`` whose header is ``head_length`` bytes, and where the
    file ends."""
    offsets, position = [], head_length
    for nbytes in sizes:
        alignment = directio.BLOCK if version >= 2 and nbytes >= directio.MIN_BYTES else ALIGNMENT
        offset = directio.round_up(position, alignment)
        offsets.append(offset)
        position = directio.round_up(offset + nbytes, alignment)
    return offsets, directio.round_up(position, ALIGNMENT)


class _Pickler(pickle.Pickler):
    def __init__(self, file: BinaryIO, storages: list[torch.UntypedStorage]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._storages = storages
        self._numbers: dict[tuple[int, int], int] = {}

    def persistent_id(self, obj: Any) -> tuple[Any, ...] | None:
        if not _is_raw_tensor(obj):
            return None
        storage = obj.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes()) if storage.nbytes() else (id(storage), 0)
        number = self._numbers.get(key)
        if number is None:
            number = self._numbers[key] = len(self._storages)
            self._storages.append(storage)
        return ("tensor", number, str(obj.dtype).removeprefix("torch."), tuple(obj.shape), obj.stride(),
                obj.storage_offset(), obj.requires_grad)


def _is_raw_tensor(obj: Any) -> bool:
    return (
        type(obj) is torch.Tensor
        and obj.device.type == "cpu"
        and obj.layout == torch.strided
        and obj.dtype in _RAW_DTYPES
        and not obj.is_conj()
        and not obj.is_neg()
        and not obj.__dict__  # Python attributes set on the tensor: leave those to torch's own pickling
    )


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),))


# -- reading ----------------------------------------------------------------------------------------------


def read(fh: BinaryIO, size: int, on_chunk: ChunkSink, direct: directio.DirectFile | None = None) -> Callable[[], Any]:
    """Read the whole file of ``size`` bytes from ``fh``, passing every chunk read, in order, to ``on_chunk``
    (a chunk is never changed afterwards, so it may be used later, e.g. hashed in another thread); return the
    function that decodes what was read. FormatError when the file is cut short, longer, or malformed.
    ``direct``, the same file opened for direct reads, reads the large storages (``fh`` must then be seekable)."""
    start = _read_exactly(fh, len(MAGIC), on_chunk)
    if bytes(start) != MAGIC:
        return _read_torch_save(fh, size, start, on_chunk)
    header = bytes(start) + bytes(_read_exactly(fh, _HEADER.size - len(MAGIC), on_chunk))
    _, version, _, count, pickle_length = _HEADER.unpack(header)
    if version not in READABLE_VERSIONS:
        raise FormatError(f"payload format version {version}; this SDK reads versions {READABLE_VERSIONS}")
    if _HEADER.size + count * _SIZE.size + pickle_length > size:
        raise FormatError(f"its header describes more than its {size} bytes")
    sizes = [n for (n,) in _SIZE.iter_unpack(_read_exactly(fh, count * _SIZE.size, on_chunk))]
    head_length = _HEADER.size + count * _SIZE.size + pickle_length
    offsets, end = placements(head_length, sizes, version)
    if end != size:
        raise FormatError(f"its header describes {end} bytes, not {size}")
    pickled = _read_exactly(fh, pickle_length, on_chunk)
    _read_exactly(fh, (offsets[0] if offsets else end) - head_length, on_chunk)
    slots = _slots(offsets, sizes, end, direct)  # all at once: prefaulted ahead
    if direct is not None:
        directio.prefetch(fh.fileno(), [(slot.offset, slot.end - slot.offset) for slot in slots if slot.region is None])
    with prefaulted([slot.target for slot in slots]):
        for slot in slots:
            _read_slot(fh, slot, on_chunk, direct)
    if fh.read(1):
        raise FormatError(f"longer than {size} bytes")
    storages = [slot.target.untyped_storage() for slot in slots]
    return lambda: _Unpickler(io.BytesIO(pickled), storages).load()


@dataclass
class _Slot:
    """One storage's place in the file (its bytes, then its padding) and the memory it is read into."""

    offset: int
    nbytes: int
    padding: int
    target: torch.Tensor  # uint8, the storage's bytes
    region: directio.Region | None  # for a direct read: the page-aligned memory around ``target``

    @property
    def end(self) -> int:
        return self.offset + self.nbytes + self.padding


def _slots(offsets: list[int], sizes: list[int], end: int, direct: directio.DirectFile | None) -> list[_Slot]:
    slots = []
    for offset, nbytes, following in zip(offsets, sizes, [*offsets[1:], end]):
        padding = following - offset - nbytes
        if direct is not None and nbytes >= directio.MIN_BYTES:
            region = direct.region(offset, nbytes + padding)
            slots.append(_Slot(offset, nbytes, padding, directio.storage_tensor(region, offset, nbytes), region))
        else:
            slots.append(_Slot(offset, nbytes, padding, empty_bytes(nbytes), None))
    return slots


def _read_slot(fh: BinaryIO, slot: _Slot, on_chunk: ChunkSink, direct: directio.DirectFile | None) -> None:
    """Read a storage and its padding: directly where it can, the ordinary way from where that stopped."""
    done = 0
    if slot.region is not None and direct is not None and direct.usable:
        done = _read_direct(slot, on_chunk, direct)
        fh.seek(slot.offset + done)
    if done < slot.nbytes:
        _read_storage(fh, slot.target[done:], on_chunk)
    _read_exactly(fh, slot.end - max(done, slot.nbytes) - slot.offset, on_chunk)


def _read_direct(slot: _Slot, on_chunk: ChunkSink, direct: directio.DirectFile) -> int:
    """How many bytes of the slot (storage, then padding) were read directly and passed on, in order: all of
    them, unless the file ended first or the filesystem refused direct reads (``direct.usable`` turns False).
    The ordinary reads that take over from there report the one ("cut short") and get past the other."""
    assert slot.region is not None
    passed = slot.offset
    try:
        for reached in direct.read(slot.region, slot.end, READ_CHUNK):
            if min(reached, slot.end) > passed:
                on_chunk(slot.region.view(passed, min(reached, slot.end) - passed))
                passed = min(reached, slot.end)
    except OSError:
        if direct.usable:
            raise
    return passed - slot.offset


def _read_storage(fh: BinaryIO, target: torch.Tensor, on_chunk: ChunkSink) -> None:
    """Fill the uint8 tensor ``target`` straight from ``fh``, ``READ_CHUNK`` at a time."""
    view = memoryview(target.numpy())
    for offset in range(0, target.nbytes, READ_CHUNK):
        chunk = view[offset : offset + READ_CHUNK]
        _fill(fh, chunk)
        on_chunk(chunk)


def _read_exactly(fh: BinaryIO, length: int, on_chunk: ChunkSink) -> memoryview:
    chunk = memoryview(bytearray(length))
    _fill(fh, chunk)
    on_chunk(chunk)
    return chunk


def _fill(fh: BinaryIO, view: memoryview) -> None:
    filled = 0
    while filled < view.nbytes:
        read = fh.readinto(view[filled:])
        if not read:
            raise FormatError("cut short")
        filled += read


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, storages: list[torch.UntypedStorage]) -> None:
        super().__init__(file)
        self._storages = storages

    def persistent_load(self, pid: Any) -> torch.Tensor:
        kind, number, dtype, shape, stride, offset, requires_grad = pid
        if kind != "tensor":
            raise FormatError(f"unknown reference {kind!r} in the pickle")
        tensor = torch.empty(0, dtype=getattr(torch, dtype)).set_(self._storages[number], offset, shape, stride)
        return tensor.requires_grad_(requires_grad)


def _read_torch_save(fh: BinaryIO, size: int, start: memoryview, on_chunk: ChunkSink) -> Callable[[], Any]:
    """A file written by torch.save: hash it through, then load it with torch.load from the start."""
    seen = start.nbytes
    while chunk := fh.read(READ_CHUNK):
        on_chunk(memoryview(chunk))
        seen += len(chunk)
    if seen != size:
        raise FormatError(f"{seen} bytes, not {size}")

    def decode() -> Any:
        fh.seek(0)
        # weights_only=False: the payload holds RNG states and user objects; the manifest's checksum vouches
        # that these are the bytes the SDK wrote (integrity, not trust: do not restore untrusted checkpoints).
        return torch.load(fh, map_location="cpu", weights_only=False)

    return decode
