"""The policy benchmark's quick check runs end to end on a small trace and reports every setting's closure."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "policies.py"


def test_closure_only_run_on_a_small_trace(small_trace_folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--closure-only", "--every-hours", "100", "--traces", str(small_trace_folder), "--processes", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(
        r"^\| (\d+) h / ([\d.]+) h \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| [^|]+ \| ([\d.]+) \| ", done.stdout, re.MULTILINE
    )
    assert [(row[0], row[1]) for row in rows] == [("52", "0.1"), ("52", "0.2"), ("70", "0.1"), ("70", "0.2")]
    for _, _, uniform_progress, omniscient, default, with_history in rows:
        # the lower bound holds, with the market's history too
        assert float(omniscient) <= min(float(uniform_progress), float(default), float(with_history)) + 1e-9
    assert "mean gap closed:" in done.stdout and "with the market's history:" in done.stdout


@pytest.mark.soak  # every table of docs/benchmarks.md's policy section (~20 s): `make soak` runs it
def test_the_whole_benchmark_runs_on_a_small_trace(small_trace_folder: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--traces", str(small_trace_folder), "--processes", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    live = re.search(r"make-before-break.*?\n\n(\|.*?)\n\n", done.stdout, re.DOTALL).group(1).splitlines()
    assert live[0] == "| D / d | uniform_progress | default | default, market history | default, fleet | misses |"
    assert all(row.endswith("| 0 / 0 / 0 / 0 |") for row in live[2:]) and len(live) == 6  # four settings, no miss
    assert "default, fleet " in done.stdout.split("Gap closed between uniform_progress in this view")[1]
    assert "Multi-zone, k80_1: no *_k80_1.json traces" in done.stdout
    tails = re.search(r"more than on-demand from the start.*?\n\n(\|.*?)\n\n", done.stdout, re.DOTALL).group(1)
    rows = tails.splitlines()[2:]
    assert len(rows) == 4
    for row in rows:  # the share dearer than on-demand and the dearest run, per policy; omniscient never dearer
        cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
        shares = [float(cell.split("%")[0]) for cell in cells]
        assert len(cells) == 5 and all(0 <= share <= 100 for share in shares) and shares[2] == 0.0
