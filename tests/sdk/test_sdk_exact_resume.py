"""A run preempted by real SIGTERMs (sent to the trainer's process group, as the agent does) and resumed in
new processes ends with exactly the weights of an uninterrupted run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spotrun.sdk import PREEMPTED_EXIT_CODE

TRAINERS = {
    "sampler": Path(__file__).with_name("sdk_exact_trainer.py"),
    "loader with workers": Path(__file__).with_name("sdk_loader_trainer.py"),
}
TOTAL_STEPS = 60
PREEMPTIONS = 2  # the first run and a resumed one preempted, at random steps: each trainer process costs ~3 s to start


def _start(trainer: Path, checkpoint_dir: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(trainer), str(checkpoint_dir), str(TOTAL_STEPS), str(out)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a trainer under the agent
    )


def _run_until_step(process: subprocess.Popen[str], target: int) -> tuple[int, int]:
    """Read progress until step ``target`` is done, SIGTERM the process group, and read on to the end:
    (the step it started at, the step count it saved when it stopped)."""
    assert process.stdout is not None
    start = int(process.stdout.readline().split()[1])
    for line in process.stdout:
        if int(line.split()[1]) >= target:
            os.killpg(process.pid, signal.SIGTERM)
            break
    stopped = [int(line.split()[1]) for line in process.stdout if line.startswith("stopped")]
    assert len(stopped) == 1, "the trainer did not report its final checkpoint"
    return start, stopped[0]


@pytest.mark.parametrize("feed", TRAINERS)
def test_preempted_run_ends_bit_identical_to_uninterrupted(tmp_path: Path, feed: str) -> None:
    trainer = TRAINERS[feed]
    reference = _start(trainer, tmp_path / "reference-ckpt", tmp_path / "reference.pt")
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    resumed = tmp_path / "resumed.pt"
    saved = 0
    for preemption in range(PREEMPTIONS):
        process = _start(trainer, tmp_path / "ckpt", resumed)
        target = rng.randrange(saved + 1, saved + TOTAL_STEPS // (PREEMPTIONS + 1))
        start, stopped = _run_until_step(process, target)
        assert process.wait(timeout=60) == PREEMPTED_EXIT_CODE, f"seed {seed}, preemption {preemption}"
        assert start == saved, f"seed {seed}: resumed at {start}, the last preemption saved {saved}"
        assert target < stopped < TOTAL_STEPS, f"seed {seed}: stopped at {stopped}, target {target}"
        saved = stopped
    final = _start(trainer, tmp_path / "ckpt", resumed)
    assert final.stdout is not None
    final_start = int(final.stdout.readline().split()[1])
    final.stdout.read()
    assert final.wait(timeout=60) == 0
    assert reference.stdout is not None
    reference.stdout.read()
    assert reference.wait(timeout=60) == 0

    assert final_start == saved, f"seed {seed}: resumed at {final_start}, the last preemption saved {saved}"
    expected = torch.load(tmp_path / "reference.pt", weights_only=False)
    actual = torch.load(resumed, weights_only=False)
    for name, tensor in expected["model"].items():
        assert torch.equal(actual["model"][name], tensor), f"seed {seed}: weight {name} differs"
    for index, param_state in expected["optimizer"]["state"].items():
        for key, tensor in param_state.items():
            assert torch.equal(actual["optimizer"]["state"][index][key], tensor), f"seed {seed}: adam {key}"
    assert actual["optimizer"]["param_groups"] == expected["optimizer"]["param_groups"]
    if "extra" in expected:
        assert torch.equal(actual["extra"]["loss_sum"], expected["extra"]["loss_sum"])
        assert actual["extra"]["seen"] == expected["extra"]["seen"]
