"""The digits trainer (examples/digits) as the end-to-end tests run it: its settings, and its final weights from a
run never interrupted, which every preempted run must end with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
TRAINER_ENV = {"EPOCHS": "3", "CHECKPOINT_EVERY": "5"}


def uninterrupted_run(checkpoints: Path) -> dict:
    """final.json of the trainer run once from start to end, never preempted."""
    subprocess.run(
        [sys.executable, "train.py"], cwd=DIGITS, check=True, capture_output=True, timeout=120,
        env={**os.environ, **TRAINER_ENV, "STEP_SECONDS": "0", "SPOTRUN_CHECKPOINT_DIR": str(checkpoints)},
    )
    return json.loads((checkpoints / "final.json").read_text())
