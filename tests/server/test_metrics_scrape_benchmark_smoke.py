"""The scrape benchmark runs end to end on a small store, and the totals it reports are its history's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "metrics_scrape.py"


def test_scrape_table_on_a_small_store() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "40", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = re.findall(r"^\| 40 \|(.*)\|$", done.stdout, re.M)
    attempts, _, preemptions, recoveries, seconds, *_ = (cell.strip().replace(",", "") for cell in row.split("|"))
    # 5 attempts a job, 2 of them preempted; recovered in 185 s (from the notice) and 90 s (from the end)
    assert (int(attempts), int(preemptions), int(recoveries), int(seconds)) == (200, 80, 80, 40 * 275)
