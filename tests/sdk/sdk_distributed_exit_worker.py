"""Two gloo ranks that stop through `exit_if_stopped`: `python sdk_distributed_exit_worker.py WORKDIR`
(alone; the test runs ``run_rank`` through sdk_two_ranks.py).

Rank 1 gets the stop request; both ranks save and leave through SystemExit, twice. Each rank records the exit codes,
the process groups destroyed before the exit (the SDK's own two, destroyed by the SDK, and not the user's), and that
the user's default group still works afterwards, in WORKDIR/exit-<rank>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import spotrun

WORLD_SIZE = 2


def run_rank(rank: int, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=WORLD_SIZE)
    destroyed: list[str] = []
    destroy = dist.destroy_process_group

    def recording(group=None) -> None:
        destroyed.append("default" if group is None or group is dist.group.WORLD else "other")
        destroy(group)

    dist.destroy_process_group = recording
    weights = torch.zeros(3)
    state = spotrun.torch_state(extra={"weights": weights})
    ckpt = spotrun.Checkpointer(f"{workdir}/ckpt", signals=(), every_steps=100)
    code = code_again = None
    try:
        for step in range(50):
            weights += 1
            if rank == 1 and step == 3:
                spotrun.sdk.preemption_flag.request()
            ckpt.step(state, step)
            ckpt.exit_if_stopped()
    except SystemExit as exit_:
        code = exit_.code
    try:
        ckpt.exit_if_stopped()  # asked again (a user's handler): the same exit, nothing destroyed twice
    except SystemExit as exit_:
        code_again = exit_.code
    total = torch.ones(1)
    dist.all_reduce(total)  # the user's group still works
    dist.destroy_process_group = destroy
    result = {"code": code, "code_again": code_again, "destroyed": destroyed}
    result |= {"default_sum": total.item(), "steps": weights[0].item()}
    Path(workdir, f"exit-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run_rank, args=(sys.argv[1],), nprocs=WORLD_SIZE, join=True)
