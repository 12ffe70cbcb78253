"""Fixtures of the simulator's tests."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def small_trace_folder(tmp_path: Path) -> Path:
    """A folder holding one trace of runs of spot and gaps of 1-40 steps of 600 s: 93 h, room for one 70 h job."""
    rng, data, up = random.Random(3), [], True
    while len(data) < 560:
        data += [int(up)] * rng.randint(1, 40)
        up = not up
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data[:560]}))
    return tmp_path


VariantTable = Callable[[str, Path], list[list[float]]]


@pytest.fixture
def variant_table() -> VariantTable:
    """Runs a diagnostic of benchmarks/ that prints `variant_table.print_variant_table` on a folder of traces (one
    start per trace) and returns, per setting, default's cost under each variant; checks that every setting is there,
    that no variant beats omniscient or misses a deadline, and the mean row."""

    def run(script: str, traces: Path) -> list[list[float]]:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).parents[2] / "benchmarks" / script), "--every-hours", "100",
             "--traces", str(traces), "--processes", "1"],
            capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        rows = re.findall(r"^\| (\d+) h / ([\d.]+) h \| ([\d.]+) \| ([\d.]+) \| (.+) \| ([\d /]+) \|$", done.stdout,
                          re.MULTILINE)
        assert [(row[0], row[1]) for row in rows] == [("52", "0.1"), ("52", "0.2"), ("70", "0.1"), ("70", "0.2")]
        assert "| mean gap closed |" in done.stdout
        costs = []
        for _, _, _, omniscient, defaults, misses in rows:
            costs.append([float(cell.split()[0]) for cell in defaults.split(" | ")])
            assert float(omniscient) <= min(costs[-1]) + 1e-9
            assert set(misses.split(" / ")) == {"0"}
        return costs

    return run


@pytest.fixture
def short_runs_around_a_long_gap() -> Callable[[int], list[int]]:
    """A trace's samples: runs of spot of 1-6 steps and gaps of 1-12, with a gap of 50 h early on (a job holds
    on-demand through it, and the plan may idle in it)."""

    def runs(steps: int) -> list[int]:
        rng, data, up = random.Random(0), [], True
        while len(data) < steps:
            data += [int(up)] * (rng.randint(1, 6) if up else rng.randint(1, 12))
            up = not up
            if 30 <= len(data) < 35:
                data += [0] * 300
        return data[:steps]

    return runs
