"""The kept-jobs benchmark runs end to end on a small store; the totals it reports are its history's, and status's
lists hold the jobs not ended and the newest 21 ended."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# A soak run (`make soak`): it checks that the benchmark still runs; status's lists of kept jobs are tested in
# tests/server/test_job_lists.py
pytestmark = pytest.mark.soak

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "kept_jobs.py"


def test_kept_jobs_table_on_a_small_store() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "60", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = re.findall(r"^\| 60 \|(.*)\|$", done.stdout, re.M)
    cells = [cell.strip().replace(",", "") for cell in row.split("|")]
    attempts, _, preemptions, recoveries, seconds, *_, status_rows, _tick = cells
    # 5 attempts a job, 2 of them preempted; recovered in 185 s (from the notice) and 90 s (from the end)
    assert (int(attempts), int(preemptions), int(recoveries), int(seconds)) == (300, 120, 120, 60 * 275)
    assert int(status_rows) == 20 + 21  # the newest 20 jobs still run
