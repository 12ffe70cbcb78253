"""The idle-charge measurement runs end to end on small traces, and the charge it sets changes what the plan does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "idle_charge.py"


def test_idle_charge_table_on_a_small_trace(tmp_path: Path, variant_table, short_runs_around_a_long_gap) -> None:
    trace = {"metadata": {"gap_seconds": 600}, "data": short_runs_around_a_long_gap(560)}  # 93 h: one 70 h job
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps(trace))
    rows = variant_table("idle_charge.py", tmp_path)
    # charges 0, 0.02, 0.05, 0.1, 0.2; without and with the market's history
    assert all(len(costs) == 10 for costs in rows)
    assert any(len(set(costs[:5])) > 1 for costs in rows), rows


def test_the_charge_is_chosen_leaving_each_trace_out(tmp_path: Path, short_runs_around_a_long_gap) -> None:
    for name, seed_gap in (("zone-a_v100_1", 0), ("zone-b_v100_1", 200)):
        data = short_runs_around_a_long_gap(560)
        data = data[seed_gap:] + data[:seed_gap]
        (tmp_path / f"{name}.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--leave-one-out", "--charges", "0", "0.2", "--every-hours", "100", "--traces",
         str(tmp_path), "--processes", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = re.findall(r"^\| (zone-[ab]_v100_1) \| ([\d.]+) \| (-?[\d.]+)% \|$", done.stdout, re.MULTILINE)
    assert [name for name, _, _ in chosen] == ["zone-a_v100_1", "zone-b_v100_1"]
    assert {charge for _, charge, _ in chosen} <= {"0", "0.2"}
    assert re.search(r"every trace at charge 0: -?[\d.]+%\nevery trace at charge 0.2: -?[\d.]+%\n"
                     r"each trace at the charge chosen without it: -?[\d.]+%", done.stdout), done.stdout
