"""How restore reads payload files from a local disk: large storages straight from the disk (O_DIRECT) into
page-aligned memory, small ones and everything else the ordinary way, every byte checksummed in file order
whichever way it came, and nothing decoded or loaded before the checksum matched."""

from __future__ import annotations

import errno
import io
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

import spotrun
from spotrun.sdk import CheckpointWarning, NoValidCheckpoint, directio, hostmem, layout, pagecache, tensorfile


def drop_from_page_cache(path: Path, tries: int = 50) -> None:
    """Evict the file from the page cache, checked: DONTNEED is advice, and under load the kernel has kept a page
    (once in many runs), which made restore read that file the ordinary way and failed a test expecting direct
    reads."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(tries):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            resident = pagecache.resident_pages(fd)
            if resident is None:
                pytest.skip("the page cache cannot be asked here (mincore)")
            if not resident:
                return
            time.sleep(0.02)
    finally:
        os.close(fd)
    pytest.skip(f"the kernel kept pages of {path.name} in its page cache after {tries} tries to drop them")


def require_direct_reads(path: Path) -> None:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except (AttributeError, OSError) as error:
        pytest.skip(f"no O_DIRECT reads on this filesystem: {error}")


def payload() -> OrderedDict[str, Any]:
    """Two storages above directio.MIN_BYTES whose sizes are not multiples of the block size, so they start and
    end mid-block, between small ones; a view sharing the first; a non-tensor."""
    torch.manual_seed(0)
    big = torch.randn(300_001)
    return OrderedDict(
        small=torch.arange(5),
        big=big,
        view=big[7:1000],
        wide=torch.randn(700, 1000, dtype=torch.float64),
        tail=torch.ones(3),
        note={"lr": 0.1},
    )


def write_uncached(path: Path, value: Any, extra: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    tensorfile.write(value, buffer)
    data = buffer.getvalue()
    path.write_bytes(data + extra)
    drop_from_page_cache(path)
    require_direct_reads(path)
    return data


@contextmanager
def opened(path: Path) -> Iterator[tuple[Any, directio.DirectFile | None]]:
    """The file as LocalStore opens it for restore."""
    with open(path, "rb", buffering=0) as fh, directio.open_uncached(str(path), fh.fileno()) as direct:
        yield fh, direct


@contextmanager
def counting_direct_reads() -> Iterator[list[int]]:
    reads: list[int] = []
    original = directio.DirectFile.read

    def read(self: directio.DirectFile, region: directio.Region, end: int, chunk: int) -> Iterator[int]:
        for reached in original(self, region, end, chunk):
            reads.append(reached)
            yield reached

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(directio.DirectFile, "read", read)
        yield reads


def read_all(path: Path, size: int) -> tuple[Any, bytes, directio.DirectFile | None]:
    chunks: list[bytes] = []
    with opened(path) as (fh, direct):
        decode = tensorfile.read(fh, size, lambda chunk: chunks.append(bytes(chunk)), direct)
    return decode(), b"".join(chunks), direct


def assert_same(loaded: Any, saved: Any) -> None:
    for key in ("small", "big", "view", "wide", "tail"):
        assert loaded[key].dtype == saved[key].dtype and loaded[key].stride() == saved[key].stride(), key
        assert loaded[key].storage_offset() == saved[key].storage_offset(), key
        assert torch.equal(loaded[key], saved[key]), key
    assert loaded["view"].untyped_storage().data_ptr() == loaded["big"].untyped_storage().data_ptr()
    assert loaded["big"].untyped_storage().nbytes() == saved["big"].untyped_storage().nbytes()
    assert loaded["note"] == saved["note"]


def test_large_storages_are_read_straight_from_the_disk_and_every_byte_is_checksummed_in_order(tmp_path: Path) -> None:
    value = payload()
    data = write_uncached(tmp_path / "shared.pt", value)
    with counting_direct_reads() as reads:
        loaded, checksummed, direct = read_all(tmp_path / "shared.pt", len(data))
    assert direct is not None and reads  # the two large storages came in by direct reads
    assert checksummed == data  # each byte exactly once, in file order, whichever way it was read
    assert_same(loaded, value)
    loaded["wide"].mul_(2)  # ordinary tensors: writable, in place
    assert torch.equal(loaded["wide"], value["wide"] * 2)


def test_a_direct_read_the_filesystem_refuses_falls_back_to_ordinary_reads_of_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = payload()
    data = write_uncached(tmp_path / "shared.pt", value)
    monkeypatch.setattr(tensorfile, "READ_CHUNK", 512 << 10)  # "big" takes three reads: refuse the second
    preadv, calls = os.preadv, []

    def refusing_after_one(fd: int, buffers: list[Any], offset: int, *flags: int) -> int:
        calls.append(offset)
        if len(calls) > 1:
            raise OSError(errno.EINVAL, "Invalid argument")
        return preadv(fd, buffers, offset, *flags)

    chunks: list[bytes] = []
    with opened(tmp_path / "shared.pt") as (fh, direct):
        assert direct is not None
        monkeypatch.setattr(directio.os, "preadv", refusing_after_one)
        decode = tensorfile.read(fh, len(data), lambda chunk: chunks.append(bytes(chunk)), direct)
        monkeypatch.undo()
        assert not direct.usable
    assert len(calls) == 2
    assert b"".join(chunks) == data
    assert_same(decode(), value)


@pytest.mark.parametrize("cut", [5000, 600_000])  # inside the last large storage, inside the first one
def test_a_file_cut_short_inside_a_direct_read_is_a_format_error(tmp_path: Path, cut: int) -> None:
    buffer = io.BytesIO()
    tensorfile.write(payload(), buffer)
    data = buffer.getvalue()
    (tmp_path / "shared.pt").write_bytes(data[:-cut])
    drop_from_page_cache(tmp_path / "shared.pt")
    require_direct_reads(tmp_path / "shared.pt")
    with counting_direct_reads() as reads, pytest.raises(tensorfile.FormatError, match="cut short"):
        read_all(tmp_path / "shared.pt", len(data))
    assert reads


def test_a_file_longer_than_its_manifest_says_is_a_format_error_after_direct_reads(tmp_path: Path) -> None:
    data = write_uncached(tmp_path / "shared.pt", payload(), extra=b"x" * 100)
    with counting_direct_reads() as reads, pytest.raises(tensorfile.FormatError, match="longer than"):
        read_all(tmp_path / "shared.pt", len(data))
    assert reads


def test_a_file_already_in_the_page_cache_is_read_the_ordinary_way(tmp_path: Path) -> None:
    value = payload()
    data = write_uncached(tmp_path / "shared.pt", value)
    (tmp_path / "shared.pt").read_bytes()  # now cached
    with counting_direct_reads() as reads:
        loaded, checksummed, direct = read_all(tmp_path / "shared.pt", len(data))
    assert direct is None and not reads
    assert checksummed == data
    assert_same(loaded, value)


def test_asking_whether_a_file_is_cached_does_not_cache_it(tmp_path: Path) -> None:
    """The question reads nothing: asked again and again of a dropped file, it stays out of the cache. (A probe by
    RWF_NOWAIT read started reading the page it asked about, and on a fast disk sometimes saw it arrive.)"""
    write_uncached(tmp_path / "shared.pt", payload())
    fd = os.open(tmp_path / "shared.pt", os.O_RDONLY)
    try:
        answers = []
        for _ in range(20):
            answers.append(directio._cached(fd))
            time.sleep(0.005)
        assert answers == [False] * 20
        assert pagecache.resident_pages(fd) == 0
        os.pread(fd, 1, os.fstat(fd).st_size // 2)
        assert directio._cached(fd) and pagecache.resident_pages(fd, os.fstat(fd).st_size // 2, 1) == 1
    finally:
        os.close(fd)


def training(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.Linear(512, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(8, 1024)).sum().backward()
    optimizer.step()
    return model, optimizer


def save(root: Path, seeds: list[int]) -> list[dict[str, torch.Tensor]]:
    saved = []
    with spotrun.Checkpointer(root, signals=(), keep_last=None) as ckpt:
        for step, seed in enumerate(seeds):
            model, optimizer = training(seed)
            ckpt.save(spotrun.torch_state(model=model, optimizer=optimizer), step)
            saved.append({key: value.clone() for key, value in model.state_dict().items()})
    for file in root.rglob("*.pt"):
        drop_from_page_cache(file)
    return saved


def flip_a_byte_in_a_large_storage(root: Path, steps: int) -> None:
    shared = root / layout.checkpoint_name(steps) / "shared.pt"
    with open(shared, "r+b") as fh:
        fh.seek(shared.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 1]))
    drop_from_page_cache(shared)


def test_restore_from_disk_falls_back_past_a_damaged_large_storage_and_the_state_trains_on(tmp_path: Path) -> None:
    saved = save(tmp_path, [1, 2])
    require_direct_reads(tmp_path / layout.checkpoint_name(1) / "shared.pt")
    flip_a_byte_in_a_large_storage(tmp_path, 2)
    model, optimizer = training(3)
    with counting_direct_reads() as reads, spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        with pytest.warns(CheckpointWarning, match=f"{layout.checkpoint_name(2)}: shared.pt does not match"):
            assert ckpt.restore(spotrun.torch_state(model=model, optimizer=optimizer)) == 1
    assert reads
    for key, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved[0][key]), key
    reference_model, reference_optimizer = training(1)
    for optimizer_, model_ in ((optimizer, model), (reference_optimizer, reference_model)):  # Adam's moments too
        optimizer_.zero_grad(set_to_none=True)
        model_(torch.ones(8, 1024)).sum().backward()
        optimizer_.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference_model.parameters(), strict=True))


def test_when_every_checkpoint_is_damaged_nothing_is_loaded(tmp_path: Path) -> None:
    save(tmp_path, [1])
    require_direct_reads(tmp_path / layout.checkpoint_name(1) / "shared.pt")
    flip_a_byte_in_a_large_storage(tmp_path, 1)
    model, optimizer = training(3)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    moments = [state["exp_avg"].clone() for state in optimizer.state.values()]
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt, pytest.raises(NoValidCheckpoint, match="does not match"):
        ckpt.restore(spotrun.torch_state(model=model, optimizer=optimizer))
    assert all(torch.equal(tensor, before[key]) for key, tensor in model.state_dict().items())
    assert all(torch.equal(state["exp_avg"], moment) for state, moment in zip(optimizer.state.values(), moments, strict=True))


def test_prefaulting_never_changes_bytes_being_written_and_stops_with_the_block() -> None:
    size = hostmem.PREFAULT_MIN_BYTES + (3 << 20) + 17
    tensor = hostmem.empty_bytes(size)
    pattern = torch.arange(size, dtype=torch.int64).remainder_(251).to(torch.uint8)
    tensor[: 1 << 20].copy_(pattern[: 1 << 20])  # written before the helpers start
    with pytest.raises(RuntimeError, match="stop"):
        with hostmem.prefaulted([tensor]):
            for start in range(1 << 20, size, 1 << 20):  # written while they run
                tensor[start : start + (1 << 20)].copy_(pattern[start : start + (1 << 20)])
            raise RuntimeError("stop")
    assert not [thread for thread in threading.enumerate() if thread.name == "spotrun-prefault"]
    assert torch.equal(tensor, pattern)


def test_a_large_storage_and_its_padding_come_in_one_direct_read_not_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = OrderedDict(big=torch.randn(300_001))  # 1,200,004 bytes: ends mid-block, a little over 1 MiB
    data = write_uncached(tmp_path / "shared.pt", value)
    monkeypatch.setattr(tensorfile, "READ_CHUNK", 1 << 20)  # a full chunk, then a tail of about 140 KiB
    with counting_direct_reads() as reads:
        loaded, checksummed, _ = read_all(tmp_path / "shared.pt", len(data))
    assert len(reads) == 1 and reads[0] >= len(data)
    assert checksummed == data and torch.equal(loaded["big"], value["big"])


def test_the_small_storages_between_large_ones_are_asked_of_the_disk_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = payload()
    data = write_uncached(tmp_path / "shared.pt", value)
    asked: list[tuple[int, int]] = []
    fadvise = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_WILLNEED:
            asked.append((offset, length))
        fadvise(fd, offset, length, advice)

    monkeypatch.setattr(directio.os, "posix_fadvise", recording)
    loaded, checksummed, direct = read_all(tmp_path / "shared.pt", len(data))
    assert direct is not None and checksummed == data
    assert_same(loaded, value)
    small_at = {data.index(tensor.numpy().tobytes()) for tensor in (value["small"], value["tail"])}
    big = value["big"].numpy().tobytes()
    assert all(any(start <= at < start + length for start, length in asked) for at in small_at)
    assert not any(start <= data.index(big) < start + length for start, length in asked)  # read directly
