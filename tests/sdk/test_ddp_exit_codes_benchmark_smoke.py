"""The exit-code benchmark runs end to end: two stopped DDP ranks both exit 75, and its load processes are gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "ddp_exit_codes.py"


def test_a_stop_counts_both_ranks_resumable_and_leave_no_load_behind() -> None:
    command = [sys.executable, str(SCRIPT), "--runs", "1", "--signal-ranks", "1", "--load", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "(75, 75): 1", done.stdout
    busy = subprocess.run(["pgrep", "-f", "while True: pass"], capture_output=True, text=True)
    assert busy.stdout.strip() == "", f"load processes left running: {busy.stdout}"
