"""Two gloo ranks saving one checkpoint for the two-writers test: `python sdk_two_writers_worker.py WORKDIR ROLE`.

ROLE "first": the ranks save 5 steps to WORKDIR/ckpt, rank 0 holding the commit until WORKDIR/go exists (it says
WORKDIR/first-paused once every rank's files are written). ROLE "second": once WORKDIR/first-paused exists, another
job's ranks save the same step to the same folder, with other weights (the test starts both jobs together, so that
the second's imports overlap the first's). Each rank writes the outcome of its save to WORKDIR/<ROLE>-<rank>.json.

The ranks are forked from a parent that has imported torch and torch.distributed.tensor (which a save imports): the
spawn start method had each rank import both again, ~2 s of CPU apiece, and the lock each rank takes is its own
Checkpointer's either way (the parent holds none). The second job's rank 0 is refused at once, not after waiting
CLAIM_WAIT_SECONDS for a holder that will not let go before the test says so.
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
from spotrun.sdk import storage

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


if __name__ == "__main__":
    if sys.argv[2] == "second":
        storage.CLAIM_WAIT_SECONDS = 0.0  # refused at once, not after waiting for the first job's commit
        deadline = time.monotonic() + 120
        while not Path(sys.argv[1], "first-paused").exists():
            if time.monotonic() > deadline:
                sys.exit("the first job did not reach its commit")
            time.sleep(0.05)
    mp.start_processes(run_rank, args=(sys.argv[1], sys.argv[2]), nprocs=WORLD_SIZE, join=True, start_method="fork")
