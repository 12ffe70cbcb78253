"""The sweep profile runs end to end on a small trace: each policy's runs, their costs' digest, and one table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "sweep_profile.py"


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_each_policy_is_profiled_and_its_costs_digested(small_trace_folder: Path) -> None:
    out = run("--traces", str(small_trace_folder), "--every-hours", "100", "--policy", "greedy",
              "--policy", "omniscient", "--policy", "greedy")
    rows = re.findall(r"^\| (\w+) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d,]+ \| ([0-9a-f]{12}) \|$", out, re.M)
    assert [(policy, runs) for policy, runs, _ in rows] == [("greedy", "1"), ("omniscient", "1"), ("greedy", "1")]
    assert rows[0][2] == rows[2][2] != rows[1][2]  # the same runs, the same digest; other costs, another


def test_one_table_is_timed() -> None:
    assert re.search(r"^one 52 h / 0.1 h table, best of 20: \d+ ms$", run("--one-table", "--deadline-hours", "52",
                                                                         "--overhead-hours", "0.1"), re.M)
