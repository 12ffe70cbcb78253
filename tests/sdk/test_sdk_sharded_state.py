"""Sharded state (DTensors: FSDP2, tensor parallelism) in checkpoints.

Across processes (the worker): FSDP2 over two gloo ranks stops at one rank's notice and resumes to the weights of
an uninterrupted run; the checkpoint loads into a plain model in one process and into three ranks, and an HSDP
layout saves each replicated piece once. In this process (a one-rank group): damaged pieces are skipped like any
damaged checkpoint, a misfit is refused before any piece is read, and partial sums are refused at the save.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Shard, distribute_tensor
from typer.testing import CliRunner

import spotrun
from spotrun.cli.main import app
from spotrun.sdk import layout, sharding
from spotrun.sdk.errors import CheckpointError, CheckpointWarning, IncompatibleCheckpoint, NoValidCheckpoint

WORKER = Path(__file__).with_name("sdk_sharded_worker.py")


def test_fsdp_resumes_exactly_and_its_checkpoint_loads_into_other_layouts(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(WORKER), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    two, plain, three = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("two", "plain", "three"))
    at_stop = two["at_stop"]

    assert two["stopped"] == 6  # both ranks stopped at the step rank 1 was told to
    assert two["resumed"] == two["reference"]  # the preempted, resumed run ends with the uninterrupted run's weights

    fs = fsspec.filesystem("file")
    [(steps, sharded)] = layout.list_committed(fs, str(tmp_path / "sharded"))
    assert steps == 7
    assert sorted(layout.read_manifest(fs, sharded)["files"]) == [  # type: ignore[index]
        "rank-00000.pt", "rank-00001.pt", "shards-00000.pt", "shards-00001.pt", "shards.idx", "shared.pt",
    ]

    # one process, a plain model: every piece put together
    assert plain["restored"] == 7
    assert plain["weights"] == at_stop["weights"] and plain["moments"] == at_stop["moments"]

    # and through the command line, into a file torch.load reads without spotrun
    exported = CliRunner().invoke(app, ["checkpoints", "export", str(tmp_path / "model.pt"), str(tmp_path / "sharded"),
                                        "--component", "model"])
    assert exported.exit_code == 0, exported.output
    model = torch.load(tmp_path / "model.pt", weights_only=True)
    assert {name: tensor.tolist() for name, tensor in model.items()} == at_stop["weights"]

    # three ranks: other boxes (7 rows as 3, 3, 1), from the sharded checkpoint and from the plain one
    for source in ("from_sharded", "from_plain"):
        loaded = three[source]
        assert loaded["restored"] == 7 and loaded["local_rows"] == 3, source
        assert loaded["weights"] == at_stop["weights"] and loaded["moments"] == at_stop["moments"], source

    # HSDP (every piece replicated on the 3 ranks): saved once, by rank 0, and restored on every rank from it
    [(_, hsdp)] = layout.list_committed(fs, str(tmp_path / "hsdp"))
    assert [name for name in layout.read_manifest(fs, hsdp)["files"] if name.startswith("shards")] == [  # type: ignore[index]
        "shards-00000.pt", "shards.idx",
    ]
    assert three["hsdp"]["restored"] == 100
    assert three["hsdp"]["weights"] == at_stop["weights"] and three["hsdp"]["moments"] == at_stop["moments"]


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[object]:
    """A one-rank gloo group and its mesh: DTensors in this process (the Checkpointer itself runs as one process)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def sharded_model(mesh: object, rows: int = 6) -> nn.Module:
    model = nn.Linear(4, rows)
    for name, parameter in list(model.named_parameters()):
        setattr(model, name, nn.Parameter(distribute_tensor(parameter.detach(), mesh, [Shard(0)])))
    return model


def test_a_damaged_piece_or_index_is_skipped_like_any_damaged_checkpoint(tmp_path: Path, one_rank: object) -> None:
    model = sharded_model(one_rank)
    state = spotrun.torch_state(model=model, rng=False)
    saved = []
    with spotrun.Checkpointer(tmp_path / "ckpt", keep_last=None, signals=()) as ckpt:
        for step in range(3):
            with torch.no_grad():
                model.weight.add_(1.0)
            ckpt.save(state, step)
            saved.append(model.weight.full_tensor().clone())
    assert isinstance(sharding.split({"model": model.state_dict()}).structure["model"]["weight"], sharding.ShardedTensor)
    newest, middle = (tmp_path / "ckpt" / layout.checkpoint_name(steps) for steps in (3, 2))
    damaged = bytearray((newest / "shards-00000.pt").read_bytes())
    damaged[-100] ^= 0xFF
    (newest / "shards-00000.pt").write_bytes(bytes(damaged))
    (middle / "shards.idx").unlink()

    plain = nn.Linear(4, 6)  # a plain model reads every piece
    with pytest.warns(CheckpointWarning) as warned:
        restored = spotrun.Checkpointer(tmp_path / "ckpt", signals=()).restore(spotrun.torch_state(model=plain, rng=False))
    assert restored == 1
    reasons = [str(warning.message) for warning in warned]
    assert any("000000000003: shards-00000.pt does not match its size/checksum" in reason for reason in reasons)
    assert any("000000000002: shards.idx is missing" in reason or "shards.idx cannot be read" in reason for reason in reasons)
    assert torch.equal(plain.weight, saved[0])

    (tmp_path / "ckpt" / layout.checkpoint_name(1) / "shards-00000.pt").write_bytes(b"cut")
    before = sorted(path.name for path in (tmp_path / "ckpt").iterdir())
    with pytest.raises(NoValidCheckpoint, match="shards-00000.pt"):
        spotrun.Checkpointer(tmp_path / "ckpt", signals=()).restore(spotrun.torch_state(model=nn.Linear(4, 6), rng=False))
    assert sorted(path.name for path in (tmp_path / "ckpt").iterdir()) == before  # nothing deleted


def test_a_misfit_is_refused_before_any_piece_is_read_and_nothing_is_loaded(tmp_path: Path, one_rank: object) -> None:
    state = spotrun.torch_state(model=sharded_model(one_rank), rng=False)
    with spotrun.Checkpointer(tmp_path / "ckpt", signals=()) as ckpt:
        ckpt.save(state, 0)
    (tmp_path / "ckpt" / layout.checkpoint_name(1) / "shards-00000.pt").unlink()  # would be "damaged" if it were read

    for other in (nn.Linear(4, 5), sharded_model(one_rank, rows=5)):
        before = other.weight.detach().clone() if not isinstance(other.weight, DTensor) else other.weight.full_tensor()
        with pytest.raises(IncompatibleCheckpoint, match=r"model\.weight: shape \(6, 4\) in the checkpoint, \(5, 4\) here"):
            spotrun.Checkpointer(tmp_path / "ckpt", signals=()).restore(spotrun.torch_state(model=other, rng=False))
        after = other.weight if not isinstance(other.weight, DTensor) else other.weight.full_tensor()
        assert torch.equal(after, before)


def test_partial_sums_are_refused_at_the_save_naming_the_tensor(tmp_path: Path, one_rank: object) -> None:
    partial = DTensor.from_local(torch.ones(3), one_rank, [Partial()])
    ckpt = spotrun.Checkpointer(tmp_path / "ckpt", signals=())
    with pytest.raises(CheckpointError, match=r"extra\.sums: a DTensor with a Partial placement"):
        ckpt.save(spotrun.torch_state(extra={"sums": partial}, rng=False), 0)
    ckpt.close()
    assert layout.list_committed(fsspec.filesystem("file"), str(tmp_path / "ckpt")) == []


@pytest.mark.soak  # four ranks on two cores: ~15 s
def test_fsdp_over_tensor_parallelism_restores_its_twice_sharded_weights(tmp_path: Path) -> None:
    worker = Path(__file__).with_name("sdk_sharded_2d_worker.py")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    done = subprocess.run([*torchrun, str(worker), str(tmp_path / "ckpt")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank")) == [
        f"rank {rank}: weights True moments True" for rank in range(4)]
    assert "whole True" in done.stdout
