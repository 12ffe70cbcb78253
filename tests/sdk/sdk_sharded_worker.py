"""FSDP2 (``fully_shard``) over gloo on CPU for the sharded-state test: `python sdk_sharded_worker.py WORKDIR`.

1. Two ranks: an uninterrupted run of STEPS steps; a run that rank 1 alone is told to stop at STOP_AT, which
   saves (each rank its shards) and stops; then fresh models restore it and train on to STEPS. Rank 0 writes the
   final weights of both, and the full weights and Adam moments at the stop, to WORKDIR.
2. One process, a plain model: restores the two ranks' checkpoint (every piece read and put together) and
   saves it again, unsharded, to WORKDIR/plain.
3. Three ranks: restore the two ranks' checkpoint into a 3-way sharding (other boxes) and the plain one into
   the same sharding (cut up), train on a step; then an HSDP layout (mesh 3 x 1: the shards replicated on
   every rank) restores it, saves (one copy of each piece, by rank 0) and restores its own save.
Each phase writes what it saw to WORKDIR/<phase>.json (rank 0); the test compares them.

Every phase runs in processes forked from this one (sdk_forked_ranks.py: torch and the SDK imported once for all).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import sdk_forked_ranks  # imports what the forked ranks use, once
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import spotrun

STEPS, STOP_AT = 12, 6  # STOP_AT: the 0-based step after which rank 1 is told to stop
SAMPLES = 48


def build(mesh: Any = None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model (7 and 3 rows: shards of unequal sizes over 2 and 3 ranks), sharded over ``mesh`` if given."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Dropout(0.2), nn.Linear(7, 3))
    if mesh is not None:
        for layer in (model[0], model[3]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(SAMPLES, 5, generator=generator), torch.randint(0, 3, (SAMPLES,), generator=generator)


def sampler(rank: int, world: int) -> spotrun.ResumableSampler:
    return spotrun.ResumableSampler(SAMPLES, batch_size=4, seed=3, world_size=world, rank=rank)


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # a collective: every rank calls it


def weights(model: nn.Module) -> dict[str, list]:
    return {name: full(tensor).tolist() for name, tensor in model.state_dict().items()}


def moments(optimizer: torch.optim.Optimizer) -> list[list]:
    return [full(optimizer.state[param]["exp_avg"]).tolist() for group in optimizer.param_groups for param in group["params"]]


def train(model, optimizer, sampler, state, ckpt, start: int, stop: int, stop_rank: int | None = None) -> int:
    inputs, labels = data()
    batches = sampler.stream()
    for step in range(start, stop):
        indices = next(batches)
        loss = nn.functional.cross_entropy(model(inputs[indices]), labels[indices])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if ckpt is None:
            continue
        if step == STOP_AT and dist.get_rank() == stop_rank:
            spotrun.sdk.preemption_flag.request()
        ckpt.step(state, step)
        if ckpt.should_stop:
            return step
    return stop - 1


def setup(rank: int, world: int, workdir: str, name: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous-{name}", rank=rank, world_size=world)
    torch.manual_seed(100 + rank)  # each rank its own dropout stream


def run(rank: int, world: int, workdir: str, mesh: Any, stop_rank: int | None, ckpt_dir: str | None) -> tuple:
    """A fresh sharded model trained to STEPS (from a checkpoint when ``ckpt_dir`` has one); (model, optimizer,
    step it stopped after)."""
    model, optimizer = build(mesh)
    state = spotrun.torch_state(model=model, optimizer=optimizer, sampler=(shuffled := sampler(rank, world)))
    ckpt = None if ckpt_dir is None else spotrun.Checkpointer(ckpt_dir, every_steps=100, signals=())
    start = (ckpt.restore(state) or 0) if ckpt is not None else 0
    stopped = train(model, optimizer, shuffled, state, ckpt, start, STEPS, stop_rank)
    if ckpt is not None:
        ckpt.close()
    return model, optimizer, stopped


def two_ranks(rank: int, workdir: str) -> None:
    setup(rank, 2, workdir, "two")
    mesh = init_device_mesh("cpu", (2,))
    uninterrupted, _, _ = run(rank, 2, workdir, mesh, None, None)
    reference = weights(uninterrupted)
    stopped_model, stopped_optimizer, stopped = run(rank, 2, workdir, mesh, 1, f"{workdir}/sharded")
    at_stop = {"weights": weights(stopped_model), "moments": moments(stopped_optimizer)}
    spotrun.sdk.preemption_flag.clear()  # a new attempt starts without the notice
    resumed, _, _ = run(rank, 2, workdir, mesh, None, f"{workdir}/sharded")
    result = {"stopped": stopped, "reference": reference, "resumed": weights(resumed), "at_stop": at_stop}
    if rank == 0:
        Path(workdir, "two.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def one_plain_process(_: int, workdir: str) -> None:
    model, optimizer = build()
    state = spotrun.torch_state(model=model, optimizer=optimizer, sampler=sampler(0, 1))
    restored = spotrun.Checkpointer(f"{workdir}/sharded", signals=()).restore(state)
    result = {"restored": restored, "weights": weights(model), "moments": moments(optimizer)}
    with spotrun.Checkpointer(f"{workdir}/plain", signals=()) as plain:
        plain.save(state, restored - 1)
    Path(workdir, "plain.json").write_text(json.dumps(result))


def three_ranks(rank: int, workdir: str) -> None:
    setup(rank, 3, workdir, "three")
    result: dict[str, Any] = {}
    for source in ("sharded", "plain"):
        model, optimizer = build(init_device_mesh("cpu", (3,)))
        state = spotrun.torch_state(model=model, optimizer=optimizer, sampler=sampler(rank, 3))
        result[f"from_{source}"] = {
            "restored": spotrun.Checkpointer(f"{workdir}/{source}", signals=()).restore(state),
            "local_rows": model[0].weight.to_local().shape[0],
            "weights": weights(model),
            "moments": moments(optimizer),
        }
    train(model, optimizer, sampler(rank, 3), state, None, 0, 1)  # the resharded optimizer state steps
    hsdp = init_device_mesh("cpu", (3, 1), mesh_dim_names=("replicate", "shard"))
    model, optimizer = build(hsdp)
    state = spotrun.torch_state(model=model, optimizer=optimizer, sampler=sampler(rank, 3))
    spotrun.Checkpointer(f"{workdir}/sharded", signals=()).restore(state)
    with spotrun.Checkpointer(f"{workdir}/hsdp", signals=()) as ckpt:
        ckpt.save(state, 99)
    again, again_optimizer = build(hsdp)
    again_state = spotrun.torch_state(model=again, optimizer=again_optimizer, sampler=sampler(rank, 3))
    result["hsdp"] = {
        "restored": spotrun.Checkpointer(f"{workdir}/hsdp", signals=()).restore(again_state),
        "weights": weights(again),
        "moments": moments(again_optimizer),
    }
    if rank == 0:
        Path(workdir, "three.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    workdir = sys.argv[1]
    for phase, processes in ((two_ranks, 2), (one_plain_process, 1), (three_ranks, 3)):
        failure = sdk_forked_ranks.run(phase, processes, workdir)
        if failure is not None:
            sys.exit(f"{phase.__name__} failed:\n{failure}")
