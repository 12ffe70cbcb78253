"""Two gloo ranks on CPU for the test of tied tensors under spread writes: `python sdk_spread_tied_worker.py WORKDIR`
(alone; the test runs ``run_rank`` through sdk_two_ranks.py).

``replicas.SPREAD_MIN_BYTES`` is lowered to 1 KiB, so that small tensors are dealt out as large ones would be. The
replicated state holds tensors that share a storage, three ways, each dealt to rank 1 (a larger filler goes to rank 0):
a model's tied weights; a base above the threshold with a view below it; and a base and view both above it, whose
base differs on rank 1 past the view's end (so rank 0 writes the base itself, and the view's digest still matches).
Both ranks save with spread_writes. Rank 0 then reads the checkpoint whole (``load_checkpoint``); each rank restores
into a fresh tied model (in place) and an empty dict (handed the loaded tensors). Each writes what it saw to
WORKDIR/result-<rank>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import spotrun
from spotrun.sdk import replicas

WORLD_SIZE = 2


class TiedModel(nn.Module):
    """An embedding and an output layer of one weight, as in a language model (32 x 16 floats: 2 KiB)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(32, 16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.embed.weight


def user_values(rank: int) -> dict[str, torch.Tensor]:
    base, diverging = torch.arange(512.0), torch.arange(1024.0)
    if rank:
        diverging[-1] = -1.0  # past the view's end: the view's digest still matches rank 0's
    return {"filler": torch.zeros(4096), "base": base, "view": base[:4],
            "diverging": diverging, "diverging_view": diverging[:512]}


def ties(state: dict) -> dict[str, bool]:
    def shared(first: torch.Tensor, second: torch.Tensor) -> bool:
        return first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()

    model, values = state["model"], state["values"]
    return {
        "model": shared(model["embed.weight"], model["head.weight"]),
        "base": shared(values["base"], values["view"]),
        "diverging": shared(values["diverging"], values["diverging_view"]),
    }


def rank_0s(state: dict) -> bool:
    saved = {"model": TiedModel(seed=0).state_dict(), "values": user_values(rank=0)}
    return all(torch.equal(state[name][key], tensor) for name in saved for key, tensor in saved[name].items())


def run_rank(rank: int, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=WORLD_SIZE)
    replicas.SPREAD_MIN_BYTES = 1024
    state = spotrun.torch_state(model=TiedModel(seed=0), values=user_values(rank), rng=False)
    with spotrun.Checkpointer(f"{workdir}/ckpt", signals=(), spread_writes=True) as ckpt:
        ckpt.save(state, 0)
    result: dict[str, object] = {}
    if rank == 0:
        loaded = spotrun.load_checkpoint(f"{workdir}/ckpt").state
        result["loaded_ties"], result["loaded_rank_0s"] = ties(loaded), rank_0s(loaded)
    fresh, handed = TiedModel(seed=1), {}
    result["restored"] = spotrun.Checkpointer(f"{workdir}/ckpt", signals=()).restore(
        spotrun.torch_state(model=fresh, values=handed, rng=False))
    restored = {"model": fresh.state_dict(), "values": handed}
    result["restored_ties"], result["restored_rank_0s"] = ties(restored), rank_0s(restored)
    result["model_still_tied"] = fresh.embed.weight is fresh.head.weight
    Path(workdir, f"result-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run_rank, args=(sys.argv[1],), nprocs=WORLD_SIZE, join=True)
