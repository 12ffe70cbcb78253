"""Checkpoints of a model trained by two gloo ranks on CPU: DDP (rank 0 writes the weights and Adam's moments
for everyone), DDP with ``spread_writes`` (each rank writes half of them; rank 0 still copies and hashes all) and
FSDP2 (each rank writes its shard), side by side in one run, on a local disk.

    .venv/bin/python benchmarks/sharded_checkpoints.py [--layers 8] [--width 2048] [--repeats 3]

The model is ``--layers`` Linear(width, width) layers; with Adam the state is three times the weights. Per layout
and repeat: the training thread's stall (``save(wait=False)``: the host snapshot), the time until the save is
committed (``wait``), the bytes each rank wrote, a restore on the same two ranks, and ``load_checkpoint`` in one
plain process (FSDP's pieces put together). Prints the medians and the FSDP/DDP ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import spotrun

WORLD = 2


def build(layout: str, layers: int, width: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    if layout.startswith("fsdp"):
        mesh = init_device_mesh("cpu", (WORLD,))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(torch.randn(4, width)).sum().backward()
    optimizer.step()  # Adam's moments exist
    return model, optimizer


def rank_main(rank: int, layout: str, layers: int, width: int, folder: str, out: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=WORLD)
    model, optimizer = build(layout, layers, width)
    state = spotrun.torch_state(model=model, optimizer=optimizer)
    ckpt = spotrun.Checkpointer(f"{folder}/ckpt", signals=(), keep_last=1, spread_writes=layout == "ddp-spread")
    dist.barrier()
    started = time.perf_counter()
    ckpt.save(state, 0, wait=False)
    stall = time.perf_counter() - started
    ckpt.wait()
    committed = time.perf_counter() - started
    ckpt.close()
    written = sum(f.stat().st_size for f in Path(folder, "ckpt").rglob("*.pt") if _mine(f.name, rank))
    fresh_model, fresh_optimizer = build(layout, layers, width)
    dist.barrier()
    started = time.perf_counter()
    spotrun.Checkpointer(f"{folder}/ckpt", signals=()).restore(spotrun.torch_state(model=fresh_model, optimizer=fresh_optimizer))
    restored = time.perf_counter() - started
    Path(out, f"{layout}-{rank}.json").write_text(json.dumps(
        {"stall": stall, "commit": committed, "written": written, "restore": restored}))
    dist.destroy_process_group()


def _mine(name: str, rank: int) -> bool:
    return name in (f"rank-{rank:05d}.pt", f"shards-{rank:05d}.pt") or (rank == 0 and name in ("shared.pt", "shards.idx"))


def one(layout: str, layers: int, width: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"spotrun-{layout}-") as folder, tempfile.TemporaryDirectory() as out:
        mp.spawn(rank_main, args=(layout, layers, width, folder, out), nprocs=WORLD, join=True)
        ranks = [json.loads(Path(out, f"{layout}-{rank}.json").read_text()) for rank in range(WORLD)]
        started = time.perf_counter()
        spotrun.load_checkpoint(f"{folder}/ckpt")
        whole = time.perf_counter() - started
    return {
        "stall": max(r["stall"] for r in ranks), "commit": max(r["commit"] for r in ranks),
        "rank 0 MB": ranks[0]["written"] / 1e6, "rank 1 MB": ranks[1]["written"] / 1e6,
        "restore": max(r["restore"] for r in ranks), "load whole": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"ddp": [], "ddp-spread": [], "fsdp": []}
    for _ in range(args.repeats):
        for layout in runs:  # alternated, so that both see the same machine
            runs[layout].append(one(layout, args.layers, args.width))
    weights_mb = args.layers * (args.width * args.width + args.width) * 4 / 1e6
    print(f"{args.layers} x Linear({args.width}, {args.width}): {weights_mb:.0f} MB of weights, "
          f"{3 * weights_mb:.0f} MB with Adam's moments; {WORLD} gloo ranks; medians of {args.repeats}")
    medians = {layout: {key: statistics.median(run[key] for run in done) for key in done[0]} for layout, done in runs.items()}
    print(f"{'':12}" + "".join(f"{key:>12}" for key in medians["ddp"]))
    for layout, values in medians.items():
        print(f"{layout:12}" + "".join(f"{value:12.3f}" for value in values.values()))
    for other in ("ddp-spread", "fsdp"):
        print(f"{other + '/ddp':12}" + "".join(
            f"{medians[other][key] / medians['ddp'][key]:12.2f}" if medians["ddp"][key] >= 0.001 and key != "rank 1 MB"
            else f"{'-':>12}"
            for key in medians["ddp"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
