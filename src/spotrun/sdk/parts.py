"""An object written to S3 as a multipart upload whose parts travel several at once.

s3fs's files upload a part when their buffer fills and wait for it before taking more bytes: one connection at a
time, and one connection to S3 carries far less than an instance's network. A multi-node job's ranks save straight
to the store, inside a preemption notice, so ``PartUpload`` keeps up to ``BYTES_IN_FLIGHT`` of parts going at once
(each through s3fs's own call, with its retries and the filesystem's extra arguments: encryption, requester pays)
and completes the upload with the parts in order on ``close``. A payload under one part is one PUT.
"""

from __future__ import annotations

import io
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import fsspec

from spotrun.sdk import threads

PART_BYTES = 16 * 2**20  # AWS's guidance for multipart uploads: 8 or 16 MB parts
BYTES_IN_FLIGHT = 8 * PART_BYTES
MAX_PARTS = 10_000  # S3's limit for one upload
PARTS_PER_SIZE = 2_000  # parts grow 2x every this many: 16 MiB parts to 32 GiB, and about 1 TB in all


def can_upload_in_parts(fs: fsspec.AbstractFileSystem) -> bool:
    """An s3fs filesystem (the only one whose multipart calls this module knows)."""
    return "s3" in _protocols(fs) and callable(getattr(fs, "call_s3", None)) and hasattr(fs, "split_path")


def part_size(number: int, first: int = PART_BYTES, fixed: bool = False) -> int:
    """The size of part ``number`` (from 1); a store that takes only equal parts (R2) gets ``first`` throughout."""
    return first if fixed else first << ((number - 1) // PARTS_PER_SIZE)


class PartUpload(io.RawIOBase):
    """A write-only file: ``write`` hands over bytes, ``close`` makes the object, ``discard`` leaves none."""

    def __init__(
        self, fs: fsspec.AbstractFileSystem, path: str, *, part_bytes: int | None = None,
        bytes_in_flight: int | None = None,
    ) -> None:
        super().__init__()
        self._fs = fs
        self._bucket, self._key, _ = fs.split_path(path)
        self._first_part = part_bytes or PART_BYTES
        self._fixed = bool(getattr(fs, "fixed_upload_size", False))
        self._bytes_in_flight = max(bytes_in_flight or BYTES_IN_FLIGHT, self._first_part)
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._sent: deque[tuple[int, Future[dict[str, Any]]]] = deque()  # (size, its upload), oldest first
        self._parts: list[dict[str, Any]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._finished = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        chunk = memoryview(data).cast("B")
        self._buffer += chunk
        while len(self._buffer) >= (size := self._next_part_size()):
            with memoryview(self._buffer) as buffered:
                body = bytes(buffered[:size])
            del self._buffer[:size]
            self._send(body)
        return chunk.nbytes

    def close(self) -> None:
        """Send what is left and complete the upload (or PUT a payload smaller than a part)."""
        if self.closed:
            return
        try:
            if not self._finished:
                self._finish()
        finally:
            self._shut_pool(cancel=False)
            super().close()

    def discard(self) -> None:
        """Abandon the upload: the parts sent are dropped by S3 and no object is made."""
        self._finished = True
        self._shut_pool(cancel=True)
        if self._upload_id is not None:
            self._fs.call_s3("abort_multipart_upload", Bucket=self._bucket, Key=self._key, UploadId=self._upload_id)
            self._upload_id = None
        super().close()

    def _finish(self) -> None:
        self._finished = True
        if self._upload_id is None:
            self._fs.call_s3("put_object", Bucket=self._bucket, Key=self._key, Body=bytes(self._buffer))
        else:
            if self._buffer:
                self._send(bytes(self._buffer))
            while self._sent:
                self._take_oldest()
            self._fs.call_s3(
                "complete_multipart_upload", Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                MultipartUpload={"Parts": self._parts},
            )
        self._buffer = bytearray()
        self._fs.invalidate_cache(f"{self._bucket}/{self._key}")  # and the listings of the folders above it

    def _next_part_size(self) -> int:
        return part_size(len(self._parts) + len(self._sent) + 1, self._first_part, self._fixed)

    def _send(self, body: bytes) -> None:
        number = len(self._parts) + len(self._sent) + 1
        if number > MAX_PARTS:
            raise ValueError(f"s3://{self._bucket}/{self._key} would need more than S3's {MAX_PARTS} parts")
        if self._upload_id is None:
            created = self._fs.call_s3("create_multipart_upload", Bucket=self._bucket, Key=self._key)
            self._upload_id = created["UploadId"]
            self._pool = ThreadPoolExecutor(
                max(1, self._bytes_in_flight // self._first_part), thread_name_prefix="spotrun-part"
            )
        while self._sent and sum(size for size, _ in self._sent) + len(body) > self._bytes_in_flight:
            self._take_oldest()
        assert self._pool is not None
        self._sent.append((len(body), threads.submit(self._pool, self._upload_part, number, body)))

    def _upload_part(self, number: int, body: bytes) -> dict[str, Any]:
        answer = self._fs.call_s3(
            "upload_part", Bucket=self._bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number,
            Body=body,
        )
        part = {"PartNumber": number, "ETag": answer["ETag"]}
        if "ChecksumSHA256" in answer:
            part["ChecksumSHA256"] = answer["ChecksumSHA256"]
        return part

    def _take_oldest(self) -> None:
        """Wait for the oldest part in flight; its error, if it failed, is the upload's."""
        _, upload = self._sent.popleft()
        self._parts.append(upload.result())

    def _shut_pool(self, cancel: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=cancel)
            self._pool = None


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
