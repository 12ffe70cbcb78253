"""A writer SIGKILLed at random moments while saving never leaves a checkpoint that restore would take
half-written: restore never raises, never warns, and returns the newest committed checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import spotrun
from spotrun.sdk import layout

WRITER = Path(__file__).with_name("sdk_crash_writer.py")
sys.path.insert(0, str(WRITER.parent))
from sdk_crash_writer import LARGE, writer_state  # noqa: E402  (a helper file, not a package)

sys.path.pop(0)


class ForkServer:
    """The writer fork server: one torch import for all trials."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WRITER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run_and_kill(self, root: Path, report: Path, after_seconds: float) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{root}\t{report}\n")
        self.process.stdin.flush()
        pid = int(self.process.stdout.readline())
        time.sleep(after_seconds)
        os.kill(pid, signal.SIGKILL)
        assert self.process.stdout.readline().strip() == "reaped"

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


def _last_reported(report: Path) -> int:
    """The last step count the writer reported as committed (a line cut by the kill does not count)."""
    lines = report.read_text().split("\n")[:-1] if report.exists() else []
    return int(lines[-1]) if lines else 0


def _check_after_kill(root: Path, report: Path, trial: str) -> None:
    reported = _last_reported(report)
    state, values = writer_state(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a committed but corrupt checkpoint would warn
        with spotrun.Checkpointer(root, signals=()) as ckpt:
            restored = ckpt.restore(state) or 0
    # the kill may land after a commit and before its report line
    assert restored in (reported, reported + 1), f"trial {trial}: restored {restored}, reported {reported}"
    model = state.components["model"]
    assert values["steps"] == restored or restored == 0, f"trial {trial}: mixed checkpoint"
    if restored:
        assert torch.equal(values["buffer"], torch.full((64,), float(restored))), f"trial {trial}"
        assert torch.equal(values["large"], torch.full((LARGE,), float(restored))), f"trial {trial}"
        assert torch.equal(model.weight, torch.full((8, 16), float(restored))), f"trial {trial}"  # type: ignore[attr-defined]
    fs = ckpt.fs
    for _, path in layout.list_committed(fs, str(root)):
        layout.read_verified(fs, path)  # every folder that looks committed is intact


def _kill_trials(fork_server: ForkServer, root: Path, trials: int, seed: int) -> None:
    """Kill the writer at random moments; the window widens when the machine is slow (no commit between two
    kills) and narrows again when it is fast, so the kills keep landing across saves under any load."""
    rng = random.Random(seed)
    report = root.parent / "report.txt"
    window, advanced = 0.05, 0
    for trial in range(trials):
        before = _last_reported(report)
        fork_server.run_and_kill(root, report, rng.uniform(0.0, window))
        _check_after_kill(root, report, f"{trial} (seed {seed})")
        if _last_reported(report) > before:
            advanced += 1
            window = max(0.05, window / 1.2)
        else:
            window = min(1.0, window * 1.5)
    assert advanced >= trials // 4, f"only {advanced} of {trials} trials saw a commit: they tested little (seed {seed})"


def test_sigkill_during_saves_never_exposes_partial_checkpoint(fork_server: ForkServer, tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    _kill_trials(fork_server, tmp_path / "ckpt", trials=30, seed=seed)  # 1,000 in the soak run below


@pytest.mark.soak
def test_sigkill_during_saves_soak(fork_server: ForkServer, tmp_path: Path) -> None:
    _kill_trials(fork_server, tmp_path / "ckpt", trials=1000, seed=random.randrange(2**32))
