"""A moto_server S3 on 127.0.0.1 with one bucket, for the benchmarks that save to or copy through an object store."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3

from spotrun.agent.gang import free_port

CREDENTIALS = {"key": "k", "secret": "s"}


@contextmanager
def moto_s3(bucket: str) -> Iterator[int]:
    """A moto_server holding ``bucket``; its port. Stopped on exit."""
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        make_bucket(f"http://127.0.0.1:{port}", bucket)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def make_bucket(endpoint: str, bucket: str) -> None:
    for _ in range(200):
        try:
            boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDENTIALS["key"],
                         aws_secret_access_key=CREDENTIALS["secret"], region_name="us-east-1").create_bucket(Bucket=bucket)
            return
        except Exception:  # not up yet
            time.sleep(0.1)
    raise RuntimeError(f"no S3 at {endpoint}")


def storage_options(endpoint: str) -> dict:
    """s3fs's options for ``endpoint``, a fresh filesystem each time (no instance shared between runs)."""
    return {**CREDENTIALS, "skip_instance_cache": True,
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
