"""A Checkpointer's save straight to an object store (a moto_server S3 on 127.0.0.1, through s3fs), as a multi-node
job's ranks save: the host memory a save takes on top of the state, and how long it takes.

    .venv/bin/python benchmarks/object_store_save.py [--size-mib 512] [--repeats 3] [--per-connection-mbps 0]

The state is Linear layers with Adam's moments (``--size-mib`` in all). Each repeat saves it (a fresh Checkpointer,
so the first save's host snapshot counts), waits until the save is committed, and restores it into a fresh copy.
Peak extra memory is the process's RSS high-water mark (VmHWM, reset through /proc/self/clear_refs before the save)
minus its RSS just before; it counts the snapshot (one copy of the state) and whatever the upload buffers. Prints
one line per repeat and the medians. Run it with ``PYTHONPATH=<another tree>/src`` to measure that tree's SDK.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
import uuid
from pathlib import Path

import torch
from torch import nn

import local_s3  # benchmarks/local_s3.py, beside this script
import spotrun

BUCKET = "spotrun-bench"


def proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def state_of(size_mib: int) -> tuple[nn.Module, spotrun.TrainingState]:
    width = 1024
    layers = max(1, round(size_mib * 2**20 / (3 * 4 * width * width)))
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    return model, spotrun.torch_state(model=model, optimizer=optimizer, rng=False)


def one_save(location: str, options: dict, size_mib: int) -> dict[str, float]:
    _, state = state_of(size_mib)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    baseline = proc_status_kib("VmRSS")
    started = time.perf_counter()
    with spotrun.Checkpointer(location, storage_options=options, signals=()) as ckpt:
        ckpt.save(state, 0)
    durable = time.perf_counter() - started
    peak_extra = (proc_status_kib("VmHWM") - baseline) / 1024
    del ckpt
    _, fresh = state_of(size_mib)
    started = time.perf_counter()
    spotrun.Checkpointer(location, storage_options=options, signals=()).restore(fresh)
    return {"durable s": durable, "peak extra MiB": peak_extra, "restore s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-connection-mbps", type=float, default=0.0,
                        help="MB/s each way per connection, through local_s3's proxy; 0: straight to moto")
    args = parser.parse_args()
    with local_s3.moto_s3(BUCKET) as moto_port, contextlib.ExitStack() as stack:
        port = moto_port if not args.per_connection_mbps else stack.enter_context(
            local_s3.capped_proxy(moto_port, args.per_connection_mbps * 1e6))
        options = local_s3.storage_options(f"http://127.0.0.1:{port}")
        runs = []
        for repeat in range(args.repeats):
            run = one_save(f"s3://{BUCKET}/{uuid.uuid4().hex}", options, args.size_mib)
            runs.append(run)
            print(f"repeat {repeat}: " + ", ".join(f"{key} {value:.2f}" for key, value in run.items()), flush=True)
        cap = f", {args.per_connection_mbps:g} MB/s per connection" if args.per_connection_mbps else ""
        print(f"state {args.size_mib} MiB{cap}; sdk {Path(spotrun.__file__).parent}; medians: "
              + ", ".join(f"{key} {statistics.median(r[key] for r in runs):.2f}" for key in runs[0]))


if __name__ == "__main__":
    main()
