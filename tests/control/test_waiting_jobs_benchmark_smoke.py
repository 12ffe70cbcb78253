"""The waiting-jobs benchmark runs end to end: its counts are the controller's tries, spot's return is found, and
the first job to find it wakes the others."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# A soak run (`make soak`): it checks that the benchmark still runs; jobs sharing a market's probes are tested in tests/control/test_shared_spot_probes.py
pytestmark = pytest.mark.soak

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "waiting_jobs.py"


def test_waiting_jobs_table_for_a_few_jobs() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "4", "--hours", "0.5", "--tick", "10"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = re.findall(r"^\| 4 \|(.*)\|$", done.stdout, re.M)
    per_hour, per_zone, unasked, history_hours, spot_back, all_running = (float(c.replace(",", "")) for c in row.split("|"))
    # four jobs ask a zone about once per 300 s wait (+ a tick), as one job would (not four times as often)
    assert abs(per_hour - 3 * per_zone) < 0.2 and 9 <= per_zone <= 13
    assert unasked <= 2 * 300 + 2 * 10
    assert abs(history_hours - 20_000 / per_hour) < 0.1
    assert spot_back <= 2 * 300 + 2 * 10
    assert spot_back <= all_running <= spot_back + 2 * 10, "the first job to get spot back woke the others"
