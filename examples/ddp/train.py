"""The digits MLP trained with DistributedDataParallel (or FSDP2: PARALLEL=fsdp) over every node of a multi-node
spotrun job.

Each node runs one process; torch.distributed reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK from the
environment the spotrun agent sets (or torchrun's). The sampler gives every rank its share of each epoch, and
the Checkpointer commits a checkpoint only once every rank has written its part, so all ranks resume from the
same step. Environment: EPOCHS (default 20), STEP_SECONDS (a sleep per step, default 0), CHECKPOINT_EVERY
(default 10), COLLECTIVE_TIMEOUT (seconds a rank waits for a lost peer, default 60), PARALLEL (ddp, the default:
every rank holds the whole model; fsdp: `fully_shard`, every rank holds and saves its shard of the weights and of
Adam's moments, see spotrun.sdk.sharding). Rank 0 writes final.json
({"sha256", "accuracy", "steps"}) into the checkpoint folder; every rank prints when its first step after a
(re)start is done, which benchmarks/multinode_recovery.py reads.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import spotrun
from spotrun.sdk import preemption_flag

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "digits"))
from train import BATCH_SIZE, SEED, accuracy, build_model, load_data  # noqa: E402  (the single-node example)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parallel(model: nn.Module, how: str, world_size: int) -> nn.Module:
    if how == "fsdp":
        mesh = init_device_mesh("cpu", (world_size,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    if how != "ddp":
        raise SystemExit(f"PARALLEL must be ddp or fsdp, not {how!r}")
    wrapped = DistributedDataParallel(model)
    wrapped.register_comm_hook(None, spotrun.exact_allreduce)  # bit-exact resume with 3+ ranks (see its doc)
    return wrapped


def whole_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full weights on every rank (FSDP's shards gathered: every rank must call this)."""
    state = model.module.state_dict() if isinstance(model, DistributedDataParallel) else model.state_dict()
    return {name: tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor for name, tensor in state.items()}


def steps_left(sampler: spotrun.ResumableSampler, epochs: int) -> int:
    """The batches this rank has still to train: the rest of the current epoch, then whole epochs up to ``epochs``.
    Resumed on another number of ranks than the checkpoint's, that is another number of steps than the checkpoint's
    run would have taken (the rest of the epoch and the epochs after are shared out anew)."""
    rest_of_epoch = -(-(sampler.samples_in(sampler.epoch) - sampler.position) // sampler.batch_size)
    return rest_of_epoch + max(0, epochs - sampler.epoch - 1) * sampler.items_in(sampler.epoch + 1)


def main() -> None:
    epochs = int(os.environ.get("EPOCHS", "20"))
    step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
    timeout = timedelta(seconds=float(os.environ.get("COLLECTIVE_TIMEOUT", "60")))
    # before the rendezvous, which waits for every rank: a notice meanwhile is kept, and saved at the first step
    preemption_flag.install()
    dist.init_process_group("gloo", timeout=timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x_train, y_train, x_test, y_test = load_data()

    seed_everything(SEED)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = parallel(build_model(), os.environ.get("PARALLEL", "ddp"), world_size)
    seed_everything(SEED + rank)  # each rank its own dropout stream, saved and restored per rank
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    sampler = spotrun.ResumableSampler(
        len(x_train), batch_size=BATCH_SIZE, shuffle=True, seed=SEED, world_size=world_size, rank=rank
    )
    total_steps = epochs * len(sampler)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)

    ckpt = spotrun.Checkpointer(every_steps=int(os.environ.get("CHECKPOINT_EVERY", "10")), total_steps=total_steps)
    state = spotrun.torch_state(model=model, optimizer=optimizer, scheduler=scheduler, sampler=sampler)
    start = ckpt.restore(state) or 0
    if start:
        total_steps = ckpt.total_steps = start + steps_left(sampler, epochs)
        scheduler.T_max = total_steps  # the schedule ends where the training does (the same, on as many ranks)
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "env"
    print(f"rank {rank}/{world_size}: starting at step {start} of {total_steps} (launcher {launcher})", flush=True)

    batches = sampler.stream()
    loss_fn = nn.CrossEntropyLoss()
    for step in range(start, total_steps):
        indices = next(batches)
        loss = loss_fn(model(x_train[indices]), y_train[indices])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step == start:
            print(f"rank {rank}: first step {step} done at {time.time():.3f}", flush=True)
        if step_seconds:
            time.sleep(step_seconds)
        if step % 20 == 0 or step == total_steps - 1:
            print(f"rank {rank}: epoch {sampler.epoch} step {step} loss {loss.item():.4f}", flush=True)
        ckpt.step(state, step)
        ckpt.exit_if_stopped()  # every rank stops at the same step, after the same committed checkpoint

    ckpt.save(state, total_steps - 1)
    weights = whole_weights(model)
    tested = accuracy(model, x_test, y_test)  # every rank: FSDP gathers each layer for the forward pass
    if rank == 0:
        result = {"sha256": spotrun.weights_sha256(weights), "accuracy": tested, "steps": total_steps}
        with ckpt.fs.open(f"{ckpt.root}/final.json", "w") as fh:
            json.dump(result, fh)
        print(f"test accuracy {result['accuracy']:.4f}; weights sha256 {result['sha256']}", flush=True)
    ckpt.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except SystemExit:  # exit_if_stopped: every rank saved and stops at the same step
        dist.destroy_process_group()  # gloo groups left to the interpreter's exit can abort it (SIGABRT)
        raise
