"""A file in an object store read front to back as byte ranges fetched several at once.

A stream through ``fs.open`` fetches one block after another over one connection, and one connection to S3 or GCS
carries far less than an instance's network: a restore straight from the store (a multi-node job's ranks read their
checkpoint so) waited on it. ``RangeReader`` keeps ``AHEAD`` ranges of ``RANGE_BYTES`` in flight (``fs.cat_file``
with a start and end: a ranged GET) and hands their bytes out in order, so it reads as a stream and holds at most
``AHEAD`` ranges in memory.
"""

from __future__ import annotations

import io
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import fsspec

RANGE_BYTES = 16 * 2**20  # AWS's guidance for byte-range fetches: 8 or 16 MB
AHEAD = 8


class RangeReader(io.RawIOBase):
    """``path`` of ``size`` bytes on ``fs``, read in order (``seek`` starts the fetching again from there)."""

    def __init__(
        self, fs: fsspec.AbstractFileSystem, path: str, size: int, *, range_bytes: int | None = None,
        ahead: int | None = None,
    ) -> None:
        super().__init__()
        self._fs, self._path, self._size = fs, path, size
        self._range_bytes, self._ahead = range_bytes or RANGE_BYTES, ahead or AHEAD
        self._pool = ThreadPoolExecutor(self._ahead, thread_name_prefix="spotrun-range")
        self._pending: deque[Future[bytes]] = deque()
        self._next_start = 0  # of the next range to ask for
        self._current = memoryview(b"")
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        position = max(0, base + offset)
        if position != self._position:
            self._drop_pending()
            self._position = self._next_start = position
            self._current = memoryview(b"")
        return position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not self._current:
            self._current = self._next_range()
            if not self._current:
                return 0
        count = min(len(buffer), len(self._current))
        memoryview(buffer).cast("B")[:count] = self._current[:count]
        self._current = self._current[count:]
        self._position += count
        return count

    def close(self) -> None:
        if not self.closed:
            self._drop_pending()
            self._pool.shutdown(wait=True)
        super().close()

    def _next_range(self) -> memoryview:
        while len(self._pending) < self._ahead and self._next_start < self._size:
            end = min(self._next_start + self._range_bytes, self._size)
            self._pending.append(self._pool.submit(self._fs.cat_file, self._path, start=self._next_start, end=end))
            self._next_start = end
        if not self._pending:
            return memoryview(b"")
        data = self._pending.popleft().result()
        if not data:
            raise OSError(f"{self._path}: the store returned no bytes before its end ({self._size} bytes)")
        return memoryview(data)

    def _drop_pending(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending.clear()
