"""The long-wait benchmark runs end to end on small sizes and measures a job with the tries it was asked for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "long_wait.py"


def test_long_wait_table_on_small_sizes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tries", "0", "--tries", "60", "--repeats", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^\| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", done.stdout, re.M)
    assert [row[0] for row in rows] == ["0", "60"], done.stdout
    (_, few, few_events, *_), (_, many, many_events, *_) = rows
    # the copies reach the size asked for (whole rounds of tries), and each round brings its events
    assert int(few) < 20 and 57 <= int(many.replace(",", "")) <= 63 + 2
    assert int(many_events.replace(",", "")) > 2 * int(many.replace(",", ""))
