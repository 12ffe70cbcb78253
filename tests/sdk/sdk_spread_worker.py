"""Two gloo ranks on CPU for the spread-writes test: `python sdk_spread_worker.py WORKDIR`
(alone; the test runs ``run_rank`` through sdk_two_ranks.py).

A DDP model with BatchNorm and Adam, and a user dict with two large tensors: one the same on both ranks, one holding
each rank's number (shared state is rank 0's by contract). After three steps both ranks save; rank 1 writes part of
the replicated state. Then fresh objects restore it on each rank, which writes what it got back to
WORKDIR/result-<rank>.json: whether weights, Adam's moments and the user values are rank 0's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import spotrun

WORLD_SIZE = 2


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(512, 600), nn.BatchNorm1d(600), nn.ReLU(), nn.Linear(600, 512)))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def run_rank(rank: int, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=WORLD_SIZE)
    model, optimizer = build()
    extra = {"same": torch.ones(500_000), "per_rank": torch.full((450_000,), float(rank))}
    state = spotrun.torch_state(model=model, optimizer=optimizer, extra=extra, rng=False)
    data = torch.randn(64, 512, generator=torch.Generator().manual_seed(rank))
    for step in range(3):
        loss = model(data[step * 16 : (step + 1) * 16]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with spotrun.Checkpointer(f"{workdir}/ckpt", signals=(), spread_writes=True) as ckpt:  # on by default on S3, GCS
        ckpt.save(state, 2)
    kept = [{"model": model.module.state_dict(), "moments": [optimizer.state[p]["exp_avg"] for p in model.parameters()]}]
    dist.broadcast_object_list(kept, src=0)  # rank 0's state: what every rank must get back
    fresh, fresh_optimizer = build()
    fresh_extra = {"same": torch.zeros(1), "per_rank": torch.zeros(1)}
    restored = spotrun.Checkpointer(f"{workdir}/ckpt", signals=()).restore(
        spotrun.torch_state(model=fresh, optimizer=fresh_optimizer, extra=fresh_extra, rng=False))
    result = {
        "restored": restored,
        "model": all(torch.equal(fresh.module.state_dict()[k], v) for k, v in kept[0]["model"].items()),
        "moments": all(torch.equal(fresh_optimizer.state[p]["exp_avg"], m)
                       for p, m in zip(fresh.parameters(), kept[0]["moments"], strict=True)),
        "same": bool(torch.equal(fresh_extra["same"], torch.ones(500_000))),
        "per_rank": bool(torch.equal(fresh_extra["per_rank"], torch.zeros(450_000))),
        "buffers_differed": not torch.equal(model.module.state_dict()["1.running_mean"], kept[0]["model"]["1.running_mean"])
        if rank else None,
    }
    Path(workdir, f"result-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run_rank, args=(sys.argv[1],), nprocs=WORLD_SIZE, join=True)
