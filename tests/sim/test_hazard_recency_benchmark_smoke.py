"""The recency benchmark runs end to end, and on a market that changes at the job's start the recent runs win."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "hazard_recency.py"


def churny_then_calm(seed: int, calm_from: int = 432) -> list[int]:
    """Runs of 1-3 steps, then from `calm_from` runs of 30-60 steps; 853 steps: 3 days of history before the one start
    (432), then its 70 h."""
    rng, data, up = random.Random(seed), [], True
    while len(data) < 853:
        data += [int(up)] * (rng.randint(1, 3) if len(data) < calm_from else rng.randint(30, 60))
        up = not up
    return data[:853]


def losses(stdout: str) -> dict[str, tuple[float, float]]:
    """weighting: (log-loss, % against equal)."""
    rows = re.findall(r"^\| ([a-z0-9 ]+) \| (\d+) \| ([+-]\d+\.\d)% \|", stdout, re.MULTILINE)
    return {name: (float(loss), float(change)) for name, loss, change in rows}


def run_benchmark(folder: Path, data: list[int], gap_seconds: float = 600) -> str:
    (folder / "zone-a_k80_1.json").write_text(json.dumps({"metadata": {"gap_seconds": gap_seconds}, "data": data}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--traces", str(folder), "--every-hours", "100"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_recent_runs_forecast_better_when_the_market_changed_at_the_start(tmp_path: Path) -> None:
    stdout = run_benchmark(tmp_path, churny_then_calm(3))
    found = losses(stdout)
    assert set(found) == {
        "frozen", "equal", "decay 1 d", "decay 2 d", "decay 4 d", "decay 7 d", "history as 20 runs",
        "history as 50 runs", "history as 100 runs", "history at half weight", "no history", "chosen on the day before",
    }, stdout
    assert found["equal"][1] == 0.0 and found["equal"][0] > 0
    assert found["frozen"][1] > 0  # even counted once, the window's long runs teach the refitted model something
    assert found["decay 1 d"][1] < -10 and found["history as 20 runs"][1] < -10, stdout
    assert found["no history"][1] < -10, stdout
    # the day before the start was as churny as the rest of the history: it says to keep the history
    assert found["chosen on the day before"] == found["equal"], stdout


def test_the_day_before_the_start_chooses_no_history_when_the_market_changed_then(tmp_path: Path) -> None:
    found = losses(run_benchmark(tmp_path, churny_then_calm(3, calm_from=432 - 144)))
    assert found["no history"][1] < -10
    assert found["chosen on the day before"] == found["no history"]


def test_a_trace_sampled_every_300_s_is_read_at_every_600_s(tmp_path: Path) -> None:
    data = churny_then_calm(5)
    doubled = [sample for sample in data for _ in range(2)]
    (tmp_path / "doubled").mkdir()
    assert losses(run_benchmark(tmp_path / "doubled", doubled, gap_seconds=300)) == losses(run_benchmark(tmp_path, data))
