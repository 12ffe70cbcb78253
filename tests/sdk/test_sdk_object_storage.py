"""Checkpoints on object stores, each a real server on 127.0.0.1 reached through its fsspec filesystem: S3 (a
moto_server, s3fs) and GCS (gcp-storage-emulator, gcsfs). Round trip, keep-last-N, manifest-last commit,
fallback past a corrupt object."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import fsspec
import pytest
import torch

import spotrun
from spotrun.sdk import CheckpointWarning, layout, tensorfile
from spotrun.sdk.storage import WRITE_CHUNK, CheckpointStore

SERVERS = Path(sys.executable).parent
BUCKET = "spotrun-sdk-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{process.args[0]} exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{process.args[0]} did not listen on 127.0.0.1:{port} within {timeout} s")


def _server_command(scheme: str, port: int) -> list[str]:
    if scheme == "s3":
        return [str(SERVERS / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    return [str(SERVERS / "gcp-storage-emulator"), "start", "-H", "127.0.0.1", "--port", str(port), "--in-memory",
            f"--default-bucket={BUCKET}", "-q"]


def _s3_options(port: int) -> dict[str, Any]:
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).create_bucket(Bucket=BUCKET)
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "skip_instance_cache": True,
    }


def _gs_options(port: int) -> dict[str, Any]:
    # gcsfs's default class first asks the gRPC storage-control API for the bucket's layout, which the emulator
    # does not serve (a 60 s timeout per bucket); the plain JSON-API filesystem is what talks to it.
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    return {"endpoint_url": f"http://127.0.0.1:{port}", "token": "anon", "project": "test", "skip_instance_cache": True}


@pytest.fixture(scope="module", params=["s3", "gs"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    """(URL scheme, storage_options) of a fresh server on a free port, with an empty bucket."""
    scheme, port = request.param, _free_port()
    server = subprocess.Popen(_server_command(scheme, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, server)
        yield scheme, _s3_options(port) if scheme == "s3" else _gs_options(port)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def remote(store: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A fresh folder in the bucket, and the storage_options to reach it."""
    scheme, options = store
    return f"{scheme}://{BUCKET}/{uuid.uuid4().hex}", options


def _state(fill: float) -> tuple[spotrun.TrainingState, torch.nn.Module]:
    model = torch.nn.Linear(5, 2)
    with torch.no_grad():
        model.weight.fill_(fill)
    return spotrun.torch_state(model=model), model


def test_round_trip_with_keep_last(remote: tuple[str, dict[str, Any]]) -> None:
    with spotrun.Checkpointer(remote[0], storage_options=remote[1], every_steps=1, signals=()) as ckpt:
        for step in range(4):
            ckpt.step(_state(float(step))[0], step)
            ckpt.wait()
    # old checkpoints are removed in the writer thread after the commit that wait() returns at; close waits
    names = sorted(path.rsplit("/", 1)[-1] for path in ckpt.fs.ls(ckpt.root))
    assert names == ["ckpt-000000000003", "ckpt-000000000004"]
    assert sorted(p.rsplit("/", 1)[-1] for p in ckpt.fs.ls(f"{ckpt.root}/ckpt-000000000004")) == [
        "manifest.json",
        "rank-00000.pt",
        "shared.pt",
    ]
    state, model = _state(-1.0)
    with spotrun.Checkpointer(remote[0], storage_options=remote[1], signals=()) as ckpt:
        assert ckpt.restore(state) == 4
    assert torch.equal(model.weight, torch.full((2, 5), 3.0))


def test_folder_without_manifest_is_not_a_checkpoint(remote: tuple[str, dict[str, Any]]) -> None:
    with spotrun.Checkpointer(remote[0], storage_options=remote[1], keep_last=None, signals=()) as ckpt:
        ckpt.save(_state(1.0)[0], 0)
        ckpt.fs.pipe_file(f"{ckpt.root}/ckpt-000000000009/shared.pt", b"half a save")
        state, model = _state(-1.0)
        assert ckpt.restore(state) == 1
    assert torch.equal(model.weight, torch.full((2, 5), 1.0))


def test_corrupt_object_falls_back_with_warning(remote: tuple[str, dict[str, Any]]) -> None:
    with spotrun.Checkpointer(remote[0], storage_options=remote[1], signals=()) as ckpt:
        ckpt.save(_state(1.0)[0], 0)
        ckpt.save(_state(2.0)[0], 1)
        ckpt.fs.pipe_file(f"{ckpt.root}/ckpt-000000000002/shared.pt", b"overwritten")
        state, model = _state(-1.0)
        with pytest.warns(CheckpointWarning, match="ckpt-000000000002"):
            assert ckpt.restore(state) == 1
    assert torch.equal(model.weight, torch.full((2, 5), 1.0))


class RecordingUpload:
    """An object being written: records each write's size; ``discard`` abandons it, ``close`` stores it."""

    def __init__(self, stored: dict[str, bytes], path: str) -> None:
        self.stored, self.path, self.data, self.writes, self.discarded = stored, path, bytearray(), [], False

    def write(self, data: Any) -> int:
        chunk = bytes(memoryview(data).cast("B"))
        self.writes.append(len(chunk))
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.stored[self.path] = bytes(self.data)

    def discard(self) -> None:
        self.discarded = True


def test_a_payload_streams_to_the_object_store_in_bounded_writes_and_a_failed_one_is_abandoned(monkeypatch) -> None:
    store, stored, uploads = CheckpointStore(fsspec.filesystem("memory"), "/bucket/run"), {}, []

    def upload(path: str, mode: str) -> RecordingUpload:
        uploads.append(RecordingUpload(stored, path))
        return uploads[-1]

    monkeypatch.setattr(store.fs, "open", upload)
    payload = {"big": torch.arange(3 * WRITE_CHUNK // 8 + 5, dtype=torch.float64)}  # 3 pieces and a bit
    entry = store.write_payload("/bucket/run/ckpt-000000000001", "shared.pt", lambda fh: tensorfile.write(payload, fh))
    [done] = uploads
    assert max(done.writes) <= WRITE_CHUNK and sum(done.writes) > 3 * WRITE_CHUNK  # never the whole payload at once
    assert entry == layout.describe_bytes(stored["/bucket/run/ckpt-000000000001/shared.pt"])

    def fails_half_way(fh: Any) -> None:
        fh.write(b"x" * 100)
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        store.write_payload("/bucket/run/ckpt-000000000002", "shared.pt", fails_half_way)
    assert uploads[-1].discarded and "/bucket/run/ckpt-000000000002/shared.pt" not in stored


def test_a_large_payload_is_restored_through_ranges_fetched_together(
    remote: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A payload larger than a range is read as ranged GETs, several in flight (`sdk/ranges.py`): here ranges of
    64 KiB over a 1.2 MB model, so the read crosses many range ends inside tensors and the header."""
    from spotrun.sdk import ranges

    monkeypatch.setattr(ranges, "RANGE_BYTES", 64 * 1024)
    fetched: list[int] = []
    real_reader = ranges.RangeReader

    class Counted(real_reader):  # type: ignore[misc, valid-type]
        def _next_range(self):  # type: ignore[no-untyped-def]
            view = super()._next_range()
            if view:
                fetched.append(len(view))
            return view

    monkeypatch.setattr(ranges, "RangeReader", Counted)
    model = torch.nn.Sequential(torch.nn.Linear(300, 500), torch.nn.Linear(500, 300))
    with spotrun.Checkpointer(remote[0], storage_options=remote[1], signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=model), 0)
    fresh = torch.nn.Sequential(torch.nn.Linear(300, 500), torch.nn.Linear(500, 300))
    with spotrun.Checkpointer(remote[0], storage_options=remote[1], signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=fresh)) == 1
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    assert len(fetched) > 10 and max(fetched) == 64 * 1024
