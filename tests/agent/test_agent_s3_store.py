"""The checkpoint store on S3 (a local moto server), reached through storage_options like a real bucket."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from spotrun.agent.checkpoint_sync import CheckpointSync
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


def test_backup_prune_and_restore_through_s3(s3_endpoint: str, tmp_path: Path):
    boto3.client(
        "s3", endpoint_url=s3_endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="ckpts")
    options = {**CREDENTIALS, "client_kwargs": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}}
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
