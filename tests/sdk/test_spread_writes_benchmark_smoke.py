"""benchmarks/spread_writes.py runs end to end in its quick mode: one and two gloo ranks save to a moto_server S3 with
spread_writes on and off, every rank's restore gives back the tensors saved, and with two ranks spreading halves
what rank 0 writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# A soak run (`make soak`, about 30-60 s): it checks that the benchmark still runs; what spread writes do is tested in
# tests/sdk/test_sdk_distributed.py (sdk_spread_worker.py)
pytestmark = pytest.mark.soak

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "spread_writes.py"


def test_spread_writes_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "spread.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(row["world"], row["variant"]): row for row in json.loads(out.read_text())["summary"]}
    assert set(rows) == {(1, "off"), (1, "on"), (2, "off"), (2, "on")}
    for row in rows.values():
        assert row["restores"] == 2 * row["world"] == row["restores_equal"]  # after the warm-up and the last save
        assert row["fallbacks"] == 0 and 0 < row["stall"] <= row["commit"]
    spread, alone = rows[2, "on"], rows[2, "off"]
    assert alone["others_mb"] < 0.01 and alone["rank0_mb"] > 8  # rank 1: its own (empty) rank file only
    assert spread["others_mb"] > 4 and spread["rank0_mb"] < 0.6 * alone["rank0_mb"]  # 4 tensors of 2 MiB: 2 each
    assert "on/off ratios" in done.stdout
