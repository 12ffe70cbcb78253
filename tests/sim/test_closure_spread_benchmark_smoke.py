"""The spread of the benchmark's gap closed: its grid agrees with policies.py, and resampling moves it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
ROW = r"^\| (without|with) the market's history \| (-?[\d.]+)% \| (-?[\d.]+)% \| (-?[\d.]+)% – (-?[\d.]+)% \| (\d+)% \| " \
      r"(-?[\d.]+)% – (-?[\d.]+)% \| (\d+)% \|$"


def run(script: str, *options: str) -> str:
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *options], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_spread_of_the_gap_closed_on_small_traces(tmp_path: Path, short_runs_around_a_long_gap) -> None:
    for name, turn in (("zone-a_v100_1", 0), ("zone-b_v100_1", 400)):
        data = short_runs_around_a_long_gap(800)  # 133 h: starts at 0, 24, 48 h (and 72 h for 52 h jobs)
        data = data[turn:] + data[:turn]
        (tmp_path / f"{name}.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    options = ("--every-hours", "48", "--traces", str(tmp_path), "--processes", "1")
    spread = re.findall(ROW, run("closure_spread.py", *options, "--resamples", "40"), re.MULTILINE)
    assert [row[0] for row in spread] == ["without", "with"], spread

    closure = run("policies.py", "--closure-only", *options)
    without, with_history = re.search(r"mean gap closed: (-?[\d.]+)%; with the market's history: (-?[\d.]+)%",
                                      closure).groups()
    assert [row[1] for row in spread] == [without, with_history]  # the benchmark's grid is the benchmark's runs
    for row in spread:
        trace_low, trace_high, start_low, start_high = map(float, (row[3], row[4], row[6], row[7]))
        assert trace_low < trace_high and start_low < start_high, row  # two unlike traces: resampling moves it
        assert row[2] != row[1], row  # the shifted grid holds other runs
