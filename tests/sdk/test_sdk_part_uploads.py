"""PartUpload: an S3 object sent as a multipart upload with several parts in flight, against a recording fake of
s3fs's calls (order, concurrency, the memory bound) and a moto_server through s3fs (the object, the abort)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import fsspec
import pytest
import torch

import spotrun
from spotrun.sdk import parts
from spotrun.sdk.parts import PartUpload

BUCKET = "spotrun-parts-test"


class RecordingS3:
    """s3fs's `call_s3` as a recording fake: parts are kept by number; `gate` (if set) holds every upload_part
    until it has been reached `gate.parties` times at once."""

    protocol = ("s3", "s3a")

    def __init__(self, gate: threading.Barrier | None = None, fail_part: int | None = None) -> None:
        self.calls: list[str] = []
        self.parts: dict[int, bytes] = {}
        self.objects: dict[str, bytes] = {}
        self.in_flight = self.most_in_flight = 0
        self.gate, self.fail_part = gate, fail_part
        self.lock = threading.Lock()

    def split_path(self, path: str) -> tuple[str, str, None]:
        bucket, key = path.split("/", 1)
        return bucket, key, None

    def invalidate_cache(self, path: str | None = None) -> None:
        pass

    def call_s3(self, method: str, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            self.calls.append(method)
        if method == "create_multipart_upload":
            return {"UploadId": "u-1"}
        if method == "upload_part":
            return self._upload_part(kwargs["PartNumber"], kwargs["Body"])
        if method == "complete_multipart_upload":
            numbers = [part["PartNumber"] for part in kwargs["MultipartUpload"]["Parts"]]
            assert numbers == sorted(self.parts) == list(range(1, len(numbers) + 1))
            assert [part["ETag"] for part in kwargs["MultipartUpload"]["Parts"]] == [f'"{n}"' for n in numbers]
            self.objects[kwargs["Key"]] = b"".join(self.parts[n] for n in numbers)
        if method == "put_object":
            self.objects[kwargs["Key"]] = kwargs["Body"]
        return {}

    def _upload_part(self, number: int, body: bytes) -> dict[str, Any]:
        with self.lock:
            self.in_flight += len(body)
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                self.gate.wait()
            time.sleep(0.01)
            if number == self.fail_part:
                raise ConnectionResetError(f"part {number}: connection reset")
            self.parts[number] = body
            return {"ETag": f'"{number}"'}
        finally:
            with self.lock:
                self.in_flight -= len(body)


def _write_in_pieces(upload: PartUpload, data: bytes, piece: int) -> None:
    for start in range(0, len(data), piece):
        upload.write(data[start : start + piece])


def test_parts_travel_together_and_complete_in_order():
    s3 = RecordingS3(gate=threading.Barrier(3, timeout=10))  # broken unless three parts are in flight at once
    data = bytes(range(256)) * 40 * 6  # six 10,240-byte parts
    upload = PartUpload(s3, "bucket/run/shared.pt", part_bytes=10_240, bytes_in_flight=3 * 10_240)
    _write_in_pieces(upload, data, 3_000)
    upload.close()
    assert s3.objects["run/shared.pt"] == data
    assert s3.calls[0] == "create_multipart_upload" and s3.calls[-1] == "complete_multipart_upload"
    assert s3.most_in_flight <= 3 * 10_240  # the memory bound


def test_a_payload_under_one_part_is_one_put_and_an_empty_one_is_an_empty_object():
    s3 = RecordingS3()
    upload = PartUpload(s3, "bucket/small", part_bytes=1_000)
    upload.write(b"x" * 999)
    upload.close()
    empty = PartUpload(s3, "bucket/empty", part_bytes=1_000)
    empty.close()
    assert s3.objects == {"small": b"x" * 999, "empty": b""} and s3.calls == ["put_object", "put_object"]


def test_a_part_that_fails_fails_the_upload_and_discard_aborts_it():
    s3 = RecordingS3(fail_part=2)
    upload = PartUpload(s3, "bucket/big", part_bytes=100, bytes_in_flight=200)
    with pytest.raises(ConnectionResetError, match="part 2"):
        _write_in_pieces(upload, b"y" * 1_000, 100)
        upload.close()
    upload.discard()
    assert s3.calls[-1] == "abort_multipart_upload" and "big" not in s3.objects


def test_parts_grow_so_a_large_object_fits_s3s_10000_parts_and_equal_parts_stay_equal():
    sizes = [parts.part_size(number) for number in range(1, parts.MAX_PARTS + 1)]
    assert sizes[0] == parts.PART_BYTES and sizes == sorted(sizes)
    assert sum(sizes) > 900 * 2**30
    assert {parts.part_size(number, fixed=True) for number in (1, 5_000, 10_000)} == {parts.PART_BYTES}


def test_only_s3_filesystems_upload_in_parts():
    assert parts.can_upload_in_parts(RecordingS3())
    assert not parts.can_upload_in_parts(fsspec.filesystem("memory"))


@pytest.fixture(scope="module")
def s3_options() -> Any:
    port = _free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        _wait_until(lambda: client.create_bucket(Bucket=BUCKET))
        yield client, {"key": "testing", "secret": "testing", "skip_instance_cache": True,
                       "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_checkpoint_larger_than_a_part_goes_up_in_parts_and_restores(s3_options, monkeypatch):
    client, options = s3_options
    monkeypatch.setattr(parts, "PART_BYTES", 5 * 2**20)  # S3's smallest part
    sent = []
    real_upload_part = PartUpload._upload_part
    monkeypatch.setattr(PartUpload, "_upload_part", lambda self, n, body: sent.append(n) or real_upload_part(self, n, body))
    location = f"s3://{BUCKET}/{uuid.uuid4().hex}"
    model = torch.nn.Linear(1024, 4096)  # 16 MiB of weights: four parts
    with spotrun.Checkpointer(location, storage_options=options, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=model), 3)
    assert sorted(sent) == [1, 2, 3, 4]
    restored = torch.nn.Linear(1024, 4096)
    with spotrun.Checkpointer(location, storage_options=options, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=restored)) == 4  # the step to run next
    assert torch.equal(restored.weight, model.weight) and torch.equal(restored.bias, model.bias)


def test_an_abandoned_upload_leaves_no_object_and_no_parts_in_s3(s3_options):
    client, options = s3_options
    fs = fsspec.filesystem("s3", **options)
    key = f"{uuid.uuid4().hex}/rank-00000.pt"
    upload = PartUpload(fs, f"{BUCKET}/{key}", part_bytes=5 * 2**20)
    upload.write(b"z" * (11 * 2**20))  # two parts sent, one MiB waiting
    upload.discard()
    assert not fs.exists(f"{BUCKET}/{key}")
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until(action: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            action()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
