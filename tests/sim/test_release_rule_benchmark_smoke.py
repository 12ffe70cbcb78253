"""The release-rule diagnostic runs end to end on a small trace, and forbidding idling on on-demand changes costs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it


def test_release_rule_table_on_a_small_trace(tmp_path: Path, variant_table, short_runs_around_a_long_gap) -> None:
    trace = {"metadata": {"gap_seconds": 600}, "data": short_runs_around_a_long_gap(560)}  # 93 h: one 70 h job
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps(trace))
    rows = variant_table("release_rule.py", tmp_path)
    # as kept, never, within experience; without and with the market's history
    assert all(len(costs) == 6 for costs in rows)
    assert any(costs[0] != costs[1] for costs in rows), rows


def test_releases_are_told_where_the_trace_had_no_spot(tmp_path: Path, short_runs_around_a_long_gap) -> None:
    """--releases names each time the policy gave on-demand up: each lies in a gap of the trace, as old and as far
    from spot's return as the trace says."""
    data = short_runs_around_a_long_gap(560)
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parents[2] / "benchmarks" / "release_rule.py"), "--releases", "70", "0.1",
         "--history-hours", "0", "--every-hours", "100", "--traces", str(tmp_path), "--processes", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 of 1 runs gave on-demand up to idle at least once" in done.stdout
    assert re.search(r"never made \d of them cheaper and \d dearer", done.stdout)
    releases = re.findall(r"\(([\d.]+), ([\d.]+), ([\d.]+)\)", done.stdout.split("paid most")[1])
    assert releases, done.stdout
    for hour, age, back in releases:
        at = round(float(hour) * 6)  # 10-minute samples
        assert data[at] == 0
        assert float(age) == pytest.approx((at - max(i for i in range(at) if data[i]) - 1) / 6, abs=0.06)
        assert float(back) == pytest.approx((min(i for i in range(at, len(data)) if data[i]) - at) / 6, abs=0.06)
