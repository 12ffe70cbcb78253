"""How saves write payload files to a local disk: large storages on block boundaries of the file, snapshots of
large tensors in page-aligned memory, and both written with O_DIRECT straight from that memory; everything else
gathered into whole blocks; the page cache where the filesystem refuses O_DIRECT. The bytes on disk are the
same whichever way they went."""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import spotrun
from spotrun.sdk import directio, hostmem, tensorfile
from spotrun.sdk.snapshot import snapshot_to_host

from .test_sdk_restore_reads import assert_same, payload


def require_direct_writes(folder: Path) -> None:
    probe = folder / "probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_DIRECT))
    except (AttributeError, OSError) as error:
        pytest.skip(f"no O_DIRECT writes on this filesystem: {error}")
    finally:
        probe.unlink()


def written(value: Any, version: int = tensorfile.VERSION) -> bytes:
    buffer = io.BytesIO()
    tensorfile.write(value, buffer, version)
    return buffer.getvalue()


def storage_bytes(tensor: torch.Tensor) -> bytes:
    storage = tensor.untyped_storage()
    return bytes(torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),)).numpy())


@contextmanager
def recording_direct_writes() -> Iterator[list[tuple[int, int, int]]]:
    """(memory address, length, file offset) of every direct write."""
    calls: list[tuple[int, int, int]] = []
    original = directio.DirectWriter._write_at

    def write_at(self: directio.DirectWriter, chunk: memoryview, offset: int) -> None:
        calls.append((int(np.frombuffer(chunk, dtype=np.uint8).ctypes.data), chunk.nbytes, offset))
        original(self, chunk, offset)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(directio.DirectWriter, "_write_at", write_at)
        yield calls


def test_large_storages_start_and_end_on_block_boundaries_and_version_1_files_still_read() -> None:
    value = payload()
    data = written(value)
    for key in ("big", "wide"):  # above directio.MIN_BYTES, sizes not multiples of a block
        offset = data.index(storage_bytes(value[key]))
        end = offset + value[key].untyped_storage().nbytes()
        assert offset % directio.BLOCK == 0
        assert data[end : -(-end // directio.BLOCK) * directio.BLOCK] == bytes(-end % directio.BLOCK)  # zero padding
    old = written(value, version=1)
    assert old.index(storage_bytes(value["big"])) % directio.BLOCK != 0  # 64-byte places: a different layout
    for data_of_version in (data, old):
        loaded = tensorfile.read(io.BytesIO(data_of_version), len(data_of_version), lambda chunk: None)()
        assert_same(loaded, value)


def test_a_file_of_an_unknown_version_names_it() -> None:
    data = bytearray(written({"t": torch.ones(3)}))
    data[8:12] = (7).to_bytes(4, "little")
    with pytest.raises(tensorfile.FormatError, match="version 7"):
        tensorfile.read(io.BytesIO(bytes(data)), len(data), lambda chunk: None)


def test_the_direct_writer_writes_aligned_memory_from_where_it_is_and_gathers_the_rest(tmp_path: Path) -> None:
    require_direct_writes(tmp_path)
    aligned = hostmem.page_aligned_bytes(3 * directio.BLOCK + 100)
    aligned.copy_(torch.randint(0, 256, aligned.shape, dtype=torch.uint8))
    unaligned = memoryview(bytearray(os.urandom(2 * directio.BLOCK + 1)))[1:]  # a heap buffer, off a page start
    pieces = [b"head" * 100, bytes(directio.BLOCK - 400), aligned.numpy(), b"x" * 30, unaligned, b"end"]
    path = tmp_path / "file"
    with open(path, "wb", buffering=0) as fh, recording_direct_writes() as calls:
        with directio.open_for_writing(str(path), fh.fileno()) as writer:
            assert writer is not None
            for piece in pieces:
                writer.write(piece)
    expected = b"".join(bytes(memoryview(piece).cast("B")) for piece in pieces)
    assert path.read_bytes() == expected
    assert (aligned.data_ptr(), 3 * directio.BLOCK, directio.BLOCK) in calls  # its whole blocks, from its memory
    assert all(length % directio.BLOCK == 0 and offset % directio.BLOCK == 0 for _, length, offset in calls)


@pytest.mark.parametrize("refusal", [errno.EINVAL, errno.EOPNOTSUPP])
def test_a_direct_write_the_filesystem_refuses_falls_back_to_ordinary_writes_from_the_same_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    require_direct_writes(tmp_path)
    monkeypatch.setattr(directio, "WRITE_CHUNK", 2 * directio.BLOCK)  # the aligned storage takes several writes
    aligned = hostmem.page_aligned_bytes(8 * directio.BLOCK)
    aligned.copy_(torch.randint(0, 256, aligned.shape, dtype=torch.uint8))
    pwritev, calls = os.pwritev, []

    def refusing_after_one(fd: int, buffers: list[Any], offset: int, *flags: int) -> int:
        calls.append(offset)
        if len(calls) > 1:
            raise OSError(refusal, os.strerror(refusal))
        return pwritev(fd, buffers, offset, *flags)

    path = tmp_path / "file"
    with open(path, "wb", buffering=0) as fh:
        with directio.open_for_writing(str(path), fh.fileno()) as writer:
            assert writer is not None
            monkeypatch.setattr(directio.os, "pwritev", refusing_after_one)
            writer.write(aligned.numpy())
            writer.write(b"tail")
        monkeypatch.undo()
    assert not writer.usable and len(calls) == 2
    assert path.read_bytes() == bytes(aligned.numpy()) + b"tail"


def test_snapshots_of_large_contiguous_tensors_are_page_aligned_copies() -> None:
    state = {"big": torch.randn(600, 1000), "small": torch.arange(10), "strided": torch.randn(1000, 600).t()}
    snapshot = snapshot_to_host(state)
    assert snapshot["big"].data_ptr() % directio.BLOCK == 0
    for key, tensor in state.items():
        assert torch.equal(snapshot[key], tensor) and snapshot[key].data_ptr() != tensor.data_ptr(), key
    state["big"].add_(1)
    assert not torch.equal(snapshot["big"], state["big"])  # a copy, not a view
    again = snapshot_to_host(state, snapshot)  # the next save copies into the same memory
    assert again["big"].data_ptr() == snapshot["big"].data_ptr() and torch.equal(again["big"], state["big"])


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(600, 700), torch.nn.Linear(700, 3))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 600)).sum().backward()
    optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("direct", [True, False])
def test_a_checkpoint_saved_with_or_without_direct_writes_restores_the_same_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    require_direct_writes(tmp_path)
    if not direct:  # as on a filesystem that refuses O_DIRECT: the page cache path
        plain_open = os.open

        def refusing_direct(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & os.O_DIRECT:
                raise OSError(errno.EINVAL, "Invalid argument")
            return plain_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(directio.os, "open", refusing_direct)
    model, optimizer = _trained()
    with recording_direct_writes() as calls, spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        for step in (1, 2):  # the second save copies into the first one's snapshot memory
            ckpt.save(spotrun.torch_state(model=model, optimizer=optimizer), step)
    assert bool(calls) == direct
    monkeypatch.undo()
    fresh = torch.nn.Sequential(torch.nn.Linear(600, 700), torch.nn.Linear(700, 3))
    fresh_optimizer = torch.optim.Adam(fresh.parameters())
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=fresh, optimizer=fresh_optimizer)) == 3
    for saved, restored in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(saved, restored)
    assert torch.equal(
        fresh_optimizer.state_dict()["state"][0]["exp_avg_sq"], optimizer.state_dict()["state"][0]["exp_avg_sq"]
    )


def test_a_disk_that_fills_up_fails_the_save_and_keeps_the_checkpoint_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_direct_writes(tmp_path)
    model, optimizer = _trained()
    with spotrun.Checkpointer(tmp_path, signals=(), keep_last=1) as ckpt:
        state = spotrun.torch_state(model=model, optimizer=optimizer)
        ckpt.save(state, 0)
        saved = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        model[0].weight.data.add_(1.0)

        def full_disk(fd: int, buffers: list[Any], offset: int, *flags: int) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(directio.os, "pwritev", full_disk)
        with pytest.raises(spotrun.CheckpointError, match="No space left"):
            ckpt.save(state, 1)
        monkeypatch.undo()
    assert sorted(path.name for path in tmp_path.glob("ckpt-*")) == ["ckpt-000000000001"]
    fresh = torch.nn.Sequential(torch.nn.Linear(600, 700), torch.nn.Linear(700, 3))
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=fresh, optimizer=torch.optim.Adam(fresh.parameters()))) == 1
    assert all(torch.equal(fresh.state_dict()[name], saved[name]) for name in saved)
