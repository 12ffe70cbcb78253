"""What the exact-resume trainers print and do after each step, as test_sdk_exact_resume.py reads it."""

from __future__ import annotations

import time
from typing import Any

import spotrun


def end_step(ckpt: spotrun.Checkpointer, state: Any, step: int) -> None:
    """Report step ``step`` done, checkpoint as due, and exit (code 75) after a preemption's final checkpoint."""
    time.sleep(0.002)  # leaves the test time to send its signal mid-run
    print(f"step {step}", flush=True)
    ckpt.step(state, step)
    if ckpt.should_stop:
        print(f"stopped {step + 1}", flush=True)
    ckpt.exit_if_stopped()
