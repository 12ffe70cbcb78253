"""The policy benchmark's quick check runs end to end on a small trace and reports every setting's closure."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "policies.py"


def test_closure_only_run_on_a_small_trace(tmp_path: Path) -> None:
    rng, data, up = random.Random(3), [], True
    while len(data) < 560:  # runs of spot and gaps of 1-40 steps of 600 s: 93 h, room for one 70 h job
        data += [int(up)] * rng.randint(1, 40)
        up = not up
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data[:560]}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--closure-only", "--every-hours", "100", "--traces", str(tmp_path), "--processes", "1"],
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
