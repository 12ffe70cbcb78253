"""Two 2-rank gloo jobs saving one checkpoint to one folder, for the two-writers test:
`python sdk_two_writers_worker.py WORKDIR`.

The first job's ranks save 5 steps to WORKDIR/ckpt, rank 0 holding the commit until WORKDIR/go exists (it says
WORKDIR/first-paused once every rank's files are written). Once WORKDIR/first-paused exists, the second job's ranks
save the same step to the same folder, with other weights; when they are done, WORKDIR/go lets the first job commit.
Each rank writes the outcome of its save to WORKDIR/<job>-<rank>.json.

The ranks of both jobs are forked from this process, which has imported torch, torch.distributed.tensor (which a save
imports) and the SDK: spawned ranks, or a process per job, imported them again, ~2 s of CPU apiece. The lock each rank
takes is its own Checkpointer's either way (this process holds none), and each job has its own process group. The
second job's rank 0 is refused at once, not after waiting CLAIM_WAIT_SECONDS for a holder that will not let go before
the second job is done.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.tensor  # noqa: F401  (imported once, in the parent: see above)
import torch.multiprocessing as mp
from torch import nn

import spotrun
from spotrun.sdk import checkpointer, storage  # noqa: F401  (checkpointer: the SDK's modules, imported once, here)

WORLD_SIZE = 2


def hold_the_commit(ckpt: spotrun.Checkpointer, workdir: str) -> None:
    commit = ckpt._commit_reported

    def held(*args, **kwargs):
        Path(workdir, "first-paused").touch()
        deadline = time.monotonic() + 120
        while not Path(workdir, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return commit(*args, **kwargs)

    ckpt._commit_reported = held


def run_rank(rank: int, workdir: str, role: str) -> None:
    if role == "second":
        storage.CLAIM_WAIT_SECONDS = 0.0  # refused at once, not after waiting for the first job's commit
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous-{role}", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(1 if role == "first" else 2)
    model = nn.Linear(64, 64)
    ckpt = spotrun.Checkpointer(f"{workdir}/ckpt", signals=())
    if role == "first" and rank == 0:
        hold_the_commit(ckpt, workdir)
    try:
        ckpt.save(spotrun.torch_state(model=model), 4)
        outcome = "saved"
    except spotrun.CheckpointError as error:
        outcome = f"refused: {error}"
    Path(workdir, f"{role}-{rank}.json").write_text(json.dumps({"outcome": outcome}))
    ckpt.close()
    dist.destroy_process_group()


def main(workdir: str) -> None:
    first = mp.start_processes(run_rank, args=(workdir, "first"), nprocs=WORLD_SIZE, join=False, start_method="fork")
    try:
        deadline = time.monotonic() + 120
        while not Path(workdir, "first-paused").exists():
            if first.join(timeout=0.05) or time.monotonic() > deadline:  # join raises if a rank failed
                sys.exit("the first job did not reach its commit")
        mp.start_processes(run_rank, args=(workdir, "second"), nprocs=WORLD_SIZE, join=True, start_method="fork")
    finally:
        Path(workdir, "go").touch()
    while not first.join():
        pass


if __name__ == "__main__":
    main(sys.argv[1])
