"""The checkpoint store on S3 (a local moto server), reached through storage_options like a real bucket."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from spotrun.agent import checkpoint_sync
from spotrun.agent.checkpoint_sync import CheckpointSync
from spotrun.control import backup_evidence
from spotrun.sdk.backup_marks import BackupWriter
from spotrun.sdk.layout import MANIFEST_NAME, checkpoint_name

from .conftest import free_port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


CREDENTIALS = {"key": "testing", "secret": "testing"}


def bucket(s3_endpoint: str, name: str) -> dict:
    """A new bucket on the endpoint; the storage options that reach it."""
    boto3.client(
        "s3", endpoint_url=s3_endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=name)
    return {**CREDENTIALS, "client_kwargs": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}}


def test_backup_prune_and_restore_through_s3(s3_endpoint: str, tmp_path: Path):
    options = bucket(s3_endpoint, "ckpts")
    local = tmp_path / "local"
    for step in (1, 2):
        folder = local / checkpoint_name(step)
        (folder / "shards").mkdir(parents=True)
        (folder / "shards" / "model.bin").write_bytes(f"weights-{step}".encode())
        (folder / MANIFEST_NAME).write_text(json.dumps({"step": step, "files": {"shards/model.bin": {}}}))
    (local / "notes.txt").write_text("hello")
    sync = CheckpointSync(local, "s3://ckpts/job-1", options)
    assert sync.backup() is True

    for path in sorted((local / checkpoint_name(1)).rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (local / checkpoint_name(1)).rmdir()
    folder = local / checkpoint_name(3)
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"weights-3")
    (folder / MANIFEST_NAME).write_text(json.dumps({"step": 3, "files": {"model.bin": {}}}))
    assert sync.backup() is True

    fresh = tmp_path / "fresh"
    assert CheckpointSync(fresh, "s3://ckpts/job-1", options).restore() == 3
    assert sorted(p.name for p in fresh.iterdir()) == [checkpoint_name(2), checkpoint_name(3), "notes.txt"]
    assert (fresh / checkpoint_name(2) / "shards" / "model.bin").read_bytes() == b"weights-2"


class ConnectionCounter:
    """A TCP proxy on 127.0.0.1 in front of the S3 endpoint that counts the connections open at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.open = self.peak = 0
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ConnectionCounter:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop).result(5)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def reset(self) -> None:
        self.peak = self.open

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        try:
            await asyncio.gather(self._pump(reader, upstream_writer), self._pump(upstream_reader, writer))
        finally:
            self.open -= 1

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(2**16):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


def test_a_large_file_goes_up_and_comes_back_over_several_connections_at_once(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """S3 carries far less on one connection than an instance can send: a shard goes as parts in flight together,
    and comes back as byte ranges fetched together (here 5 of S3's smallest, 5 MiB). A stream through open() had
    two connections open at most, one of them idle."""
    monkeypatch.setattr(checkpoint_sync, "S3_PART_BYTES", 5 * 2**20)
    bucket(s3_endpoint, "parts")
    payload = os.urandom(25 * 2**20)
    local = tmp_path / "local"
    folder = local / checkpoint_name(7)
    folder.mkdir(parents=True)
    (folder / "shards-00000.pt").write_bytes(payload)
    (folder / MANIFEST_NAME).write_text(json.dumps({"step": 7, "files": {"shards-00000.pt": {}}}))
    with ConnectionCounter(int(s3_endpoint.rsplit(":", 1)[1])) as counter:
        options = {
            **CREDENTIALS, "skip_instance_cache": True,
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{counter.port}", "region_name": "us-east-1"},
        }
        assert CheckpointSync(local, "s3://parts/job", options).backup() is True
        uploaded_over = counter.peak
        counter.reset()
        fresh = tmp_path / "fresh"
        assert CheckpointSync(fresh, "s3://parts/job", options).restore() == 7
        fetched_over = counter.peak
    assert (fresh / checkpoint_name(7) / "shards-00000.pt").read_bytes() == payload
    assert min(uploaded_over, fetched_over) >= 4, (uploaded_over, fetched_over)


def test_the_controller_reads_when_an_attempt_last_backed_up_to_s3(s3_endpoint: str, tmp_path: Path):
    """The agent's mark of its backup, and the time S3 states for it (LastModified), as the controller reads it when
    it bills an instance gone without a stated end (`control.backup_evidence`)."""
    options = bucket(s3_endpoint, "marks")
    local = tmp_path / "local"
    folder = local / checkpoint_name(1)
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"weights")
    (folder / MANIFEST_NAME).write_text(json.dumps({"step": 1, "files": {"model.bin": {}}}))
    writer = BackupWriter(job_id=3, attempt_id=17)
    before = time.time()
    assert CheckpointSync(local, "s3://marks/job-3", options, writer=writer).backup() is True

    written_at = backup_evidence.newest_backup_at("s3://marks/job-3", writer, 10.0, options)
    assert written_at is not None and before - 2 <= written_at <= time.time() + 2  # S3 dates to the second
    assert backup_evidence.newest_backup_at("s3://marks/job-3", BackupWriter(3, 18), 10.0, options) is None
    missing_bucket = backup_evidence.newest_backup_at("s3://no-such-bucket/job-3", writer, 10.0, options)
    assert missing_bucket is None
