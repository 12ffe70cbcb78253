"""The live-decision benchmark runs end to end and reports the plan the policy really makes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "live_decide.py"


def test_live_decisions_plan_in_ten_minute_steps_with_small_tables() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^\| ([\d.]+ h / [\d.]+ h) \| (\d+) s \| (\d+) s \| ([\d,]+) MB \| ([\d.]+) s \| ([\d,]+) MB \| (\w+): [^|]+ \|$",
        done.stdout, re.MULTILINE,
    )}
    assert len(rows) == 6, done.stdout
    step, unit, table_mb, _, _, decision = rows["70 h / 48 h"]
    assert (step, unit) == ("600", "120") and int(table_mb.replace(",", "")) < 100 and decision == "Keep"
    assert rows["336 h / 200 h"][:2] == ("600", "600")  # work in whole steps before coarser steps
    step, unit, table_mb, *_ = rows["700 h / 300 h"]
    assert (step, unit) == ("1200", "1200") and int(table_mb.replace(",", "")) <= 512
