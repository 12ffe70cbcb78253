"""The waiting-jobs benchmark runs end to end: its counts are the controller's tries, spot's return is found, and
the first job to find it wakes the others."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "waiting_jobs.py"


def test_waiting_jobs_table_for_a_few_jobs() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "1", "--jobs", "4", "--hours", "0.5", "--tick", "10"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = dict(re.findall(r"^\| (\d+) \|(.*)\|$", done.stdout, re.M))
    one, four = ([float(c.replace(",", "")) for c in rows[n].split("|")] for n in ("1", "4"))
    per_hour, per_zone, unasked, history_hours, spot_back, all_running = one
    assert abs(per_hour - 3 * per_zone) < 0.2 and 9 <= per_zone <= 13  # a zone asked every 300 s wait (+ a tick)
    assert abs(history_hours - 20_000 / per_hour) < 0.1
    assert spot_back <= 2 * 300 + 2 * 10 and all_running == spot_back
    assert four[0] <= 1.5 * per_hour, "four jobs waiting ask about as often as one"
    assert four[-1] <= four[-2] + 2 * 10, "the first job to get spot back woke the others"
