"""The policy-ceiling diagnostic runs end to end on a small trace, and both whole-trace variants change decisions."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "policy_ceiling.py"


def churn_then_calm(steps: int) -> list[int]:
    """Short runs of spot and gaps in the first half, long ones after: a job's early fit and the whole trace's
    differ."""
    rng, data, up = random.Random(5), [], True
    while len(data) < steps:
        longest = 3 if len(data) < steps // 2 else 40
        data += [int(up)] * rng.randint(1, longest)
        up = not up
    return data[:steps]


def test_ceiling_table_on_a_small_trace(tmp_path: Path) -> None:
    trace = {"metadata": {"gap_seconds": 600}, "data": churn_then_calm(560)}  # 93 h: room for one 70 h job
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps(trace))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--every-hours", "100", "--traces", str(tmp_path), "--processes", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^\| (\d+) h / ([\d.]+) h \| ([\d.]+) \| ([\d.]+) \| (.+) \| ([\d /]+) \|$", done.stdout, re.MULTILINE)
    assert [(row[0], row[1]) for row in rows] == [("52", "0.1"), ("52", "0.2"), ("70", "0.1"), ("70", "0.2")]
    changed = False
    for _, _, _, omniscient, defaults, misses in rows:
        costs = [float(cell.split()[0]) for cell in defaults.split(" | ")]
        assert len(costs) == 6  # as kept, whole-trace fit, whole-trace buckets; without and with market history
        assert float(omniscient) <= min(costs) + 1e-9
        assert set(misses.split(" / ")) == {"0"}
        changed |= len({costs[0], costs[1], costs[2]}) == 3 or len({costs[3], costs[4], costs[5]}) == 3
    assert changed, done.stdout
    assert "| mean gap closed |" in done.stdout
