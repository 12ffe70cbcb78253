"""A trainer whose DataLoader workers are alive at its exit ends: the workers ignore SIGTERM (the agent's notice
goes to the whole process group), and multiprocessing's exit handler, which ends them with SIGTERM and waits without
a timeout, hung the trainer forever, its exit code 75 after a preemption never coming."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spotrun.sdk import exit_guard

LOADER_AT_MODULE_LEVEL = """
import os, signal, sys
import torch
import spotrun

data = torch.utils.data.TensorDataset(torch.arange(40.0))
loader = spotrun.ResumableLoader(data, batch_size=4, seed=0, num_workers=1)
model = torch.nn.Linear(1, 1)
state = spotrun.torch_state(model=model, sampler=loader)
ckpt = spotrun.Checkpointer(sys.argv[1], every_steps=100)
start = ckpt.restore(state) or 0
batches = loader.stream()
for step in range(start, 5):
    next(batches)
    if sys.argv[2] == "preempt" and step == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    ckpt.step(state, step)
    ckpt.exit_if_stopped()
print("loop done", flush=True)
"""

PLAIN_DATALOADER = """
import torch, spotrun
loader = torch.utils.data.DataLoader(range(100), batch_size=4, num_workers=1,
                                     worker_init_fn=spotrun.ignore_preemption_signals, persistent_workers=True)
next(iter(loader))
print("loop done", flush=True)
"""


@pytest.mark.parametrize(
    ("script", "how", "code"),
    [(LOADER_AT_MODULE_LEVEL, "run", 0), (LOADER_AT_MODULE_LEVEL, "preempt", 75), (PLAIN_DATALOADER, "run", 0)],
    ids=["resumable-loader", "resumable-loader-preempted", "plain-persistent-workers"],
)
def test_a_trainer_ends_with_its_workers_alive(tmp_path: Path, script: str, how: str, code: int) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    ended = subprocess.run([sys.executable, str(tmp_path / "train.py"), str(tmp_path / "ckpt"), how],
                           capture_output=True, text=True, timeout=120)
    assert ended.returncode == code, ended.stderr[-2000:]
    assert "Exception ignored" not in ended.stderr and "Traceback" not in ended.stderr, ended.stderr[-2000:]


def _deaf() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)


def _hearing() -> None:
    time.sleep(60)


def test_only_daemonic_children_that_ignore_sigterm_are_killed() -> None:
    context = multiprocessing.get_context("fork")
    deaf, hearing = context.Process(target=_deaf, daemon=True), context.Process(target=_hearing, daemon=True)
    deaf.start()
    hearing.start()
    try:
        deadline = time.monotonic() + 10
        while not exit_guard.ignores(deaf.pid, signal.SIGTERM):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert exit_guard.kill_children_deaf_to_sigterm() == [deaf.pid]
        assert deaf.exitcode == -signal.SIGKILL and hearing.is_alive()
    finally:
        hearing.kill()
        hearing.join()
    assert exit_guard.ignores(2**22 + 7, signal.SIGTERM) is False  # no such process
