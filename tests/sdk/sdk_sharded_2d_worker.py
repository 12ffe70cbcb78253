"""FSDP2 over tensor parallelism (a 2 x 2 mesh of gloo ranks on CPU): `torchrun --standalone --nproc-per-node 4
sdk_sharded_2d_worker.py FOLDER`. The weights are sharded twice over (FSDP's `_StridedShard` on top of TP's
`Shard`; a bias replicated over TP). Saves after two steps, restores into a fresh model, and prints on each rank
whether weights and Adam's moments came back; rank 0 also reads the checkpoint whole with `load_checkpoint`."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import spotrun


def build(mesh) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 5))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def main(folder: str) -> None:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model, optimizer = build(mesh)
    torch.manual_seed(1)
    inputs = torch.randn(8, 6)
    for _ in range(2):
        model(inputs).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    with spotrun.Checkpointer(folder, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=model, optimizer=optimizer, rng=False), 1)
    again, again_optimizer = build(mesh)
    spotrun.Checkpointer(folder, signals=()).restore(spotrun.torch_state(model=again, optimizer=again_optimizer, rng=False))
    weights = all(torch.equal(a.full_tensor(), b.full_tensor()) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    moments = all(torch.equal(optimizer.state[p]["exp_avg"].full_tensor(), again_optimizer.state[q]["exp_avg"].full_tensor())
                  for p, q in zip(model.parameters(), again.parameters()))
    whole = {name: tensor.full_tensor() for name, tensor in model.state_dict().items()}
    print(f"rank {dist.get_rank()}: weights {weights} moments {moments}", flush=True)
    if dist.get_rank() == 0:
        loaded = spotrun.load_checkpoint(folder).state["model"]
        print(f"whole {all(torch.equal(loaded[name], whole[name]) for name in whole)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
