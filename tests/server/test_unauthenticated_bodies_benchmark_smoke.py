"""The unauthenticated-bodies benchmark runs on small bodies and reports the refusals it measures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "unauthenticated_bodies.py"


def test_both_apis_refuse_the_forged_requests_it_times() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--megabytes", "0.1", "--requests", "2"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["rows"]
    assert [(row["path"], row["status"], row["body_reads"]) for row in rows] == [
        ("/api/v1/jobs", 401, 0), ("/agent/v1/attempts/1/logs", 403, 0)]  # refused unread
    assert all(row["ms_per_request"] > 0 and row["peak_mib"] >= 0 for row in rows)
