"""RangeReader: a file in a store read in order as ranges fetched several at once."""

from __future__ import annotations

import os
import threading

import fsspec
import pytest

from spotrun.sdk.ranges import RangeReader

DATA = os.urandom(100_003)


@pytest.fixture
def memory() -> fsspec.AbstractFileSystem:
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/ranges/blob", DATA)
    yield fs
    fs.rm("/ranges", recursive=True)


def test_reads_the_file_in_order_and_from_where_it_is_sought(memory: fsspec.AbstractFileSystem) -> None:
    with RangeReader(memory, "/ranges/blob", len(DATA), range_bytes=4096, ahead=3) as reader:
        chunks = []
        while chunk := reader.read(7000):
            chunks.append(chunk)
        assert b"".join(chunks) == DATA and reader.tell() == len(DATA)
        assert reader.seek(50_000) == 50_000 and reader.read(10) == DATA[50_000:50_010]
        assert reader.seek(0) == 0 and reader.read() == DATA


def test_ranges_are_fetched_together(memory: fsspec.AbstractFileSystem, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three at once or none: the barrier breaks (and the read fails) unless three fetches wait on it together."""
    together, real_cat = threading.Barrier(3, timeout=10), memory.cat_file

    def cat_when_three_wait(path, start=None, end=None, **kwargs):  # type: ignore[no-untyped-def]
        if start == 0:
            together.wait()
        elif start in (4096, 8192):
            together.wait()
        return real_cat(path, start=start, end=end, **kwargs)

    monkeypatch.setattr(memory, "cat_file", cat_when_three_wait)
    with RangeReader(memory, "/ranges/blob", len(DATA), range_bytes=4096, ahead=3) as reader:
        assert reader.read() == DATA


def test_a_store_that_returns_less_than_the_file_is_an_error(memory: fsspec.AbstractFileSystem) -> None:
    with RangeReader(memory, "/ranges/blob", len(DATA) + 10_000, range_bytes=4096) as reader:
        with pytest.raises(OSError, match="returned no bytes before its end"):
            reader.read()
