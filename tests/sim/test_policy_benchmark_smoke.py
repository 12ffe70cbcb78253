"""The policy benchmark's quick check runs end to end on a small trace and reports every setting's closure."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "policies.py"


def _write_small_trace(folder: Path) -> None:
    """Runs of spot and gaps of 1-40 steps of 600 s: 93 h, room for one 70 h job."""
    rng, data, up = random.Random(3), [], True
    while len(data) < 560:
        data += [int(up)] * rng.randint(1, 40)
        up = not up
    (folder / "zone-a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data[:560]}))


def test_closure_only_run_on_a_small_trace(tmp_path: Path) -> None:
    _write_small_trace(tmp_path)
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


def test_the_whole_benchmark_runs_on_a_small_trace(tmp_path: Path) -> None:
    _write_small_trace(tmp_path)
    done = subprocess.run([sys.executable, str(SCRIPT), "--traces", str(tmp_path), "--processes", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    live = re.search(r"make-before-break.*?\n\n(\|.*?)\n\n", done.stdout, re.DOTALL).group(1).splitlines()
    assert live[0] == "| D / d | uniform_progress | default | default, market history | default, fleet | misses |"
    assert all(row.endswith("| 0 / 0 / 0 / 0 |") for row in live[2:]) and len(live) == 6  # four settings, no miss
    assert "default, fleet " in done.stdout.split("Gap closed between uniform_progress in this view")[1]
    assert "Multi-zone, k80_1: no *_k80_1.json traces" in done.stdout
