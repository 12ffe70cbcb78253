"""The recency benchmark runs end to end, and on a market that changes at the job's start the recent runs win."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "hazard_recency.py"


def churny_then_calm(seed: int) -> list[int]:
    """3 days of runs of 1-3 steps (the history), then 70 h of runs of 30-60 steps (the job's window)."""
    rng, data, up = random.Random(seed), [], True
    while len(data) < 853:
        data += [int(up)] * (rng.randint(1, 3) if len(data) < 432 else rng.randint(30, 60))
        up = not up
    return data[:853]


def losses(stdout: str) -> dict[str, tuple[float, float]]:
    """weighting: (log-loss, % against equal)."""
    rows = re.findall(r"^\| ([a-z0-9 ]+) \| (\d+) \| ([+-]\d+\.\d)% \|", stdout, re.MULTILINE)
    return {name: (float(loss), float(change)) for name, loss, change in rows}


def test_recent_runs_forecast_better_when_the_market_changed_at_the_start(tmp_path: Path) -> None:
    trace = {"metadata": {"gap_seconds": 600}, "data": churny_then_calm(3)}
    (tmp_path / "zone-a_k80_1.json").write_text(json.dumps(trace))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--traces", str(tmp_path), "--every-hours", "100"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = losses(done.stdout)
    assert set(found) == {
        "frozen", "equal", "decay 1 d", "decay 2 d", "decay 4 d", "decay 7 d", "history as 20 runs",
        "history as 50 runs", "history as 100 runs", "history at half weight",
    }, done.stdout
    assert found["equal"][1] == 0.0 and found["equal"][0] > 0
    assert found["frozen"][1] > 0  # even counted once, the window's long runs teach the refitted model something
    assert found["decay 1 d"][1] < -10 and found["history as 20 runs"][1] < -10, done.stdout
