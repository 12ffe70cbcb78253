"""The long-wait benchmark runs end to end on small sizes and measures a job with the tries it was asked for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# A soak run (`make soak`): it checks that the benchmark still runs; the reads of a long wait are tested in tests/control/test_long_wait_reads.py
pytestmark = pytest.mark.soak

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "long_wait.py"


def table_rows(*args: str, columns: int) -> list[tuple[str, ...]]:
    """The benchmark's table rows (the first `columns` cells of each) from a run with `args`."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cell = r" ([\d,.]+) \|"
    return re.findall(r"^\|" + cell * columns, done.stdout, re.M)


def test_long_wait_table_on_small_sizes() -> None:
    rows = table_rows("--tries", "0", "--tries", "60", "--repeats", "2", columns=6)
    assert [row[0] for row in rows] == ["0", "60"], rows
    (_, few, *_), (_, many, many_events, *_) = rows
    # the copies reach the size asked for (whole rounds of tries), and each round brings its events
    assert int(few) < 20 and 57 <= int(many.replace(",", "")) <= 65
    assert int(many_events.replace(",", "")) > 2 * int(many.replace(",", ""))


def test_market_table_on_small_sizes() -> None:
    rows = table_rows("--market-tries", "0", "--market-tries", "300", "--repeats", "1", columns=3)
    assert [row[0] for row in rows] == ["0", "300"], rows
