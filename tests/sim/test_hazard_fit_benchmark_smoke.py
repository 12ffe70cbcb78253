"""The hazard model's held-out benchmark runs end to end on a small trace and checks its fit is the policy's."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "hazard_fit.py"


def runs_of_1_to_60_steps(seed: int, steps: int = 1000) -> list[int]:
    """3 days of history, then room for a 70 h horizon."""
    rng, data, up = random.Random(seed), [], True
    while len(data) < steps:
        data += [int(up)] * rng.randint(1, 60)
        up = not up
    return data[:steps]


def write_traces(folder: Path, traces: dict[str, list[int]]) -> None:
    for name, data in traces.items():
        (folder / f"{name}.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_held_out_log_loss_on_a_small_trace(tmp_path: Path) -> None:
    write_traces(tmp_path, {"zone-a_k80_1": runs_of_1_to_60_steps(5)})
    done = run_script("--traces", str(tmp_path), "--every-hours", "12")
    assert done.returncode == 0, done.stderr[-3000:]
    row = re.search(r"^\| zone-a_k80_1 \| (\d+) \| (\d+) \| ([^\n]+) \|$", done.stdout, re.MULTILINE)
    assert row is not None, done.stdout
    assert int(row.group(1)) == 420 * 3  # starts at steps 432, 504 and 576, 70 h (420 steps) each
    assert float(row.group(2)) > 0
    assert all(re.fullmatch(r"[+-]\d+\.\d%", cell.strip()) for cell in row.group(3).split("|"))
    assert re.search(r"^\| all \|", done.stdout, re.MULTILINE)


def test_a_sibling_market_that_leads_predicts_the_zone(tmp_path: Path) -> None:
    # zone-b's spot is zone-a's one step later: whether zone-a has spot now says whether zone-b's run ends next step
    leading = runs_of_1_to_60_steps(7)
    write_traces(tmp_path, {"zone-a_k80_1": leading, "zone-b_k80_1": leading[:1] + leading[:-1]})
    done = run_script("--traces", str(tmp_path), "--every-hours", "12")
    assert done.returncode == 0, done.stderr[-3000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| trace |"))
    row = next(line for line in done.stdout.splitlines() if line.startswith("| zone-b_k80_1 |"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert float(cells["logistic, age + sibling markets"].rstrip("%")) < -50, done.stdout
    assert float(cells["logistic, age"].rstrip("%")) > -50, done.stdout


def test_traces_of_different_lengths_are_refused_naming_the_folder(tmp_path: Path) -> None:
    write_traces(tmp_path, {"zone-a_k80_1": [1, 0] * 500, "zone-b_k80_1": [1, 0] * 450})
    done = run_script("--traces", str(tmp_path))
    assert done.returncode != 0
    assert str(tmp_path) in done.stderr and "different lengths" in done.stderr
