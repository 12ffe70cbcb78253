"""Two gloo ranks on CPU for the distributed test: `python sdk_distributed_worker.py WORKDIR`
(alone; the test runs ``run_rank`` through sdk_two_ranks.py).

Each rank trains a DDP model with a sharded ResumableSampler and saves every 4 steps; only rank 1 gets the
stop request (at step 6). Both ranks must stop at the same step with one committed checkpoint holding
rank 0's shared state and each rank's own RNG file. Then each rank restores into a fresh model. Each rank
writes what it saw to WORKDIR/result-<rank>.json.
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
STOP_RANK, STOP_AT_STEP = 1, 6


def build(rank: int) -> tuple[nn.Module, torch.optim.Optimizer, spotrun.ResumableSampler, spotrun.TrainingState]:
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = spotrun.ResumableSampler(40, batch_size=3, seed=5, world_size=WORLD_SIZE, rank=rank)
    return model, optimizer, sampler, spotrun.torch_state(model=model, optimizer=optimizer, sampler=sampler)


def run_rank(rank: int, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(100 + rank)  # per-rank RNG streams (dropout differs per rank)
    data = torch.randn(40, 4)
    model, optimizer, sampler, state = build(rank)
    ckpt = spotrun.Checkpointer(f"{workdir}/ckpt", every_steps=4, keep_last=5)
    batches = sampler.stream()
    stopped_at = None
    for step in range(100):
        indices = next(batches)
        loss = model(data[indices]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == STOP_RANK and step == STOP_AT_STEP:
            spotrun.sdk.preemption_flag.request()
        ckpt.step(state, step)
        if ckpt.should_stop:
            stopped_at = step
            break
    saved_rng = torch.get_rng_state()
    saved_weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    saved_sampler = sampler.state_dict()
    ckpt.close()

    torch.manual_seed(999)
    fresh_model, _, fresh_sampler, fresh_state = build(rank)
    restored = spotrun.Checkpointer(f"{workdir}/ckpt", signals=()).restore(fresh_state)
    result = {
        "stopped_at": stopped_at,
        "restored": restored,
        "rng_restored": torch.equal(torch.get_rng_state(), saved_rng),
        "weights_restored": all(torch.equal(fresh_model.state_dict()[k], v) for k, v in saved_weights.items()),
        "sampler_restored": fresh_sampler.state_dict() == saved_sampler,
    }
    Path(workdir, f"result-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run_rank, args=(sys.argv[1],), nprocs=WORLD_SIZE, join=True)
