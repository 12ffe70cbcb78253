"""The agent's backup of a checkpoint to an S3 store and its restore from it, over a network where each connection
is capped, as S3's is: one connection to S3 carries far less than an instance's network can, which is why AWS's
guidance is to spread a large object over several connections (multipart uploads, byte-range fetches).

    .venv/bin/python benchmarks/store_transfer.py [--size-mib 512] [--files 1] [--per-connection-mbps 25] [--repeats 2]

A moto_server S3 on 127.0.0.1 stands behind a proxy (its own process) that holds each TCP connection, each way, to
``--per-connection-mbps`` megabytes a second and does not limit how many there are. A checkpoint of ``--files``
files (``--size-mib`` in all, random bytes) is backed up by ``CheckpointSync.backup`` and restored into an empty
folder by ``CheckpointSync.restore``, each way two ways, alternated, every run on a fresh prefix:
- "parts", the agent's transfer: s3fs's ``put_file`` / ``get_file``, a large file as 16 MiB parts or ranges over
  several connections, ``FILES_AT_ONCE`` files at a time;
- "stream", the agent's copy before (46fe28a and earlier): each file streamed through ``open``, one after another.
The restored files are compared with the originals. Prints seconds per run, the medians and their ratios.

What it cannot tell: the real S3's per-connection rate (it varies with the instance, the region and the object)
and how a real network shares an instance's bandwidth among connections; the cap is the model's one parameter.
With no cap (``--per-connection-mbps 0``) it measures this machine's CPU: moto, the proxy and the client share it.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import fsspec

import local_s3  # benchmarks/local_s3.py, beside this script
from spotrun.agent import checkpoint_sync
from spotrun.agent.checkpoint_sync import CheckpointSync
from spotrun.sdk import layout

BUCKET = "spotrun-bench"


def stream_copy(src_fs: fsspec.AbstractFileSystem, src: str, dst_fs: fsspec.AbstractFileSystem, dst: str) -> None:
    """The agent's copy before it used the store's transfer: the file streamed through ``open``."""
    checkpoint_sync._make_parent(dst_fs, dst)
    with src_fs.open(src, "rb") as reader, dst_fs.open(dst, "wb") as writer:
        shutil.copyfileobj(reader, writer, checkpoint_sync.COPY_BUFFER_BYTES)


def write_checkpoint(root: Path, size_mib: int, files: int) -> None:
    folder = root / layout.checkpoint_name(100)
    folder.mkdir(parents=True)
    entries = {}
    for index in range(files):
        name = f"part-{index:05d}.pt"
        with open(folder / name, "wb") as out:
            for _ in range(size_mib // files):
                out.write(os.urandom(2**20))
        entries[name] = {}
    (folder / layout.MANIFEST_NAME).write_text(json.dumps({"step": 100, "files": entries}))


def one_run(way: tuple[Callable, int], source: Path, scratch: Path, store: str, options: dict) -> dict[str, float]:
    checkpoint_sync._copy_file, checkpoint_sync.FILES_AT_ONCE = way
    started = time.perf_counter()
    assert CheckpointSync(source, store, options).backup() is True
    backup = time.perf_counter() - started
    restored = scratch / uuid.uuid4().hex
    started = time.perf_counter()
    assert CheckpointSync(restored, store, options).restore() == 100
    restore = time.perf_counter() - started
    name = layout.checkpoint_name(100)
    names = [p.name for p in (source / name).iterdir()]
    _, mismatch, errors = filecmp.cmpfiles(source / name, restored / name, names, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
    shutil.rmtree(restored)
    return {"backup s": backup, "restore s": restore}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--files", type=int, default=1)
    parser.add_argument("--per-connection-mbps", type=float, default=25.0, help="MB/s each way per connection; 0: none")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    ways = {"stream": (stream_copy, 1), "parts": (checkpoint_sync._copy_file, checkpoint_sync.FILES_AT_ONCE)}
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    with (
        local_s3.moto_s3(BUCKET) as moto_port,
        local_s3.capped_proxy(moto_port, args.per_connection_mbps * 1e6) as proxy_port,
        tempfile.TemporaryDirectory() as scratch_name,
    ):
        options = local_s3.storage_options(f"http://127.0.0.1:{proxy_port}")
        scratch = Path(scratch_name)
        write_checkpoint(scratch / "source", args.size_mib, args.files)
        for repeat in range(args.repeats):
            for way, how in ways.items():
                run = one_run(how, scratch / "source", scratch, f"s3://{BUCKET}/{uuid.uuid4().hex}", options)
                runs[way].append(run)
                print(f"repeat {repeat} {way}: " + ", ".join(f"{k} {v:.2f}" for k, v in run.items()), flush=True)
    cap = f"{args.per_connection_mbps:g} MB/s per connection" if args.per_connection_mbps else "no cap"
    print(f"checkpoint {args.size_mib} MiB in {args.files} file(s), {cap}; medians:")
    medians = {way: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for way, rs in runs.items()}
    for way, values in medians.items():
        print(f"  {way}: " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()))
    print("  parts / stream: " + ", ".join(
        f"{k} {medians['parts'][k] / medians['stream'][k]:.2f}x" for k in medians["stream"]))


if __name__ == "__main__":
    main()
