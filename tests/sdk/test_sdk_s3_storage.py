"""Checkpoints on S3 (a moto_server on 127.0.0.1): round trip, keep-last-N, manifest-last commit, fallback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch

import spotrun
from spotrun.sdk import CheckpointWarning

MOTO_SERVER = Path(sys.executable).with_name("moto_server")
BUCKET = "spotrun-sdk-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "moto_server exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"moto_server did not listen on 127.0.0.1:{port} within {timeout} s")


@pytest.fixture(scope="module")
def s3_options() -> Iterator[dict[str, Any]]:
    """storage_options for s3fs pointing at a fresh moto_server with an empty bucket."""
    port = _free_port()
    server = subprocess.Popen(
        [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for_port(port, server)
        options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
            "skip_instance_cache": True,
        }
        boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)
        yield options
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def s3_url() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"


def _state(fill: float) -> tuple[spotrun.TrainingState, torch.nn.Module]:
    model = torch.nn.Linear(5, 2)
    with torch.no_grad():
        model.weight.fill_(fill)
    return spotrun.torch_state(model=model), model


def test_round_trip_with_keep_last(s3_options: dict[str, Any], s3_url: str) -> None:
    with spotrun.Checkpointer(s3_url, storage_options=s3_options, every_steps=1, signals=()) as ckpt:
        for step in range(4):
            ckpt.step(_state(float(step))[0], step)
            ckpt.wait()
        names = sorted(path.rsplit("/", 1)[-1] for path in ckpt.fs.ls(ckpt.root))
        assert names == ["ckpt-000000000003", "ckpt-000000000004"]
        assert sorted(p.rsplit("/", 1)[-1] for p in ckpt.fs.ls(f"{ckpt.root}/ckpt-000000000004")) == [
            "manifest.json",
            "rank-00000.pt",
            "shared.pt",
        ]
    state, model = _state(-1.0)
    with spotrun.Checkpointer(s3_url, storage_options=s3_options, signals=()) as ckpt:
        assert ckpt.restore(state) == 4
    assert torch.equal(model.weight, torch.full((2, 5), 3.0))


def test_folder_without_manifest_is_not_a_checkpoint(s3_options: dict[str, Any], s3_url: str) -> None:
    with spotrun.Checkpointer(s3_url, storage_options=s3_options, keep_last=None, signals=()) as ckpt:
        ckpt.save(_state(1.0)[0], 0)
        ckpt.fs.pipe_file(f"{ckpt.root}/ckpt-000000000009/shared.pt", b"half a save")
        state, model = _state(-1.0)
        assert ckpt.restore(state) == 1
    assert torch.equal(model.weight, torch.full((2, 5), 1.0))


def test_corrupt_object_falls_back_with_warning(s3_options: dict[str, Any], s3_url: str) -> None:
    with spotrun.Checkpointer(s3_url, storage_options=s3_options, signals=()) as ckpt:
        ckpt.save(_state(1.0)[0], 0)
        ckpt.save(_state(2.0)[0], 1)
        ckpt.fs.pipe_file(f"{ckpt.root}/ckpt-000000000002/shared.pt", b"overwritten")
        state, model = _state(-1.0)
        with pytest.warns(CheckpointWarning, match="ckpt-000000000002"):
            assert ckpt.restore(state) == 1
    assert torch.equal(model.weight, torch.full((2, 5), 1.0))
