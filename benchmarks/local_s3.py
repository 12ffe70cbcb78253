"""A moto_server S3 on 127.0.0.1 with one bucket, for the benchmarks that save to or copy through an object store,
and a proxy in front of it that caps each connection, as S3's are (one connection carries far less than an
instance's network), or all of its connections together, as one node's network does (``shared``)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3

from spotrun.agent.gang import free_port

CREDENTIALS = {"key": "k", "secret": "s"}
PROXY_CHUNK = 256 * 1024


@contextmanager
def moto_s3(bucket: str, in_memory: bool = False) -> Iterator[int]:
    """A moto_server holding ``bucket``; its port. Stopped on exit. moto keeps each object of over 5 MiB in a file on
    this machine's disk; ``in_memory`` keeps objects up to 4 GiB in its memory instead."""
    port = free_port()
    env = os.environ | ({"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(4 << 30)} if in_memory else {})
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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


class Pacer:
    """Holds the bytes given to it, from any number of connections, to ``bytes_per_second`` in all; an idle pacer
    saves no credit for a burst later."""

    def __init__(self, bytes_per_second: float) -> None:
        self.seconds_per_byte = 1 / bytes_per_second
        self.free_at = time.monotonic()

    async def take(self, count: int) -> None:
        now = time.monotonic()
        self.free_at = max(now, self.free_at) + count * self.seconds_per_byte
        await asyncio.sleep(self.free_at - now)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bytes_per_second: float,
                pacer: Pacer | None = None) -> None:
    started, sent = time.monotonic(), 0
    try:
        while chunk := await reader.read(PROXY_CHUNK):
            if pacer is not None:
                await pacer.take(len(chunk))
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
            if bytes_per_second:
                ahead = sent / bytes_per_second - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
    except ConnectionError:
        pass
    finally:
        writer.close()


def run_proxy(listen_port: int, target_port: int, bytes_per_second: float, shared: bool = False) -> None:
    """A TCP proxy on 127.0.0.1:listen_port to target_port, each connection capped each way; with ``shared``, all
    its connections together (a node's network: one pacer each way)."""
    up, down = (Pacer(bytes_per_second), Pacer(bytes_per_second)) if shared else (None, None)
    per_connection = 0.0 if shared else bytes_per_second

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(
            _pump(client_reader, server_writer, per_connection, up),
            _pump(server_reader, client_writer, per_connection, down),
        )

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", listen_port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


@contextmanager
def capped_proxy(target_port: int, bytes_per_second: float, shared: bool = False) -> Iterator[int]:
    """``run_proxy`` in its own process; its port."""
    port = free_port()
    proxy = multiprocessing.get_context("spawn").Process(
        target=run_proxy, args=(port, target_port, bytes_per_second, shared), daemon=True
    )
    proxy.start()
    try:
        yield port
    finally:
        proxy.terminate()
