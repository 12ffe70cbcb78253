"""The policy-ceiling diagnostic runs end to end on a small trace, and both whole-trace variants change decisions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it


def churn_then_calm(steps: int) -> list[int]:
    """Short runs of spot and gaps in the first half, long ones after: a job's early fit and the whole trace's
    differ."""
    rng, data, up = random.Random(5), [], True
    while len(data) < steps:
        longest = 3 if len(data) < steps // 2 else 40
        data += [int(up)] * rng.randint(1, longest)
        up = not up
    return data[:steps]


def test_ceiling_table_on_a_small_trace(tmp_path: Path, variant_table) -> None:
    trace = {"metadata": {"gap_seconds": 600}, "data": churn_then_calm(560)}  # 93 h: room for one 70 h job
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps(trace))
    rows = variant_table("policy_ceiling.py", tmp_path)
    # as kept, whole-trace fit, whole-trace buckets; without and with the market's history
    assert all(len(costs) == 6 for costs in rows)
    assert any(len(set(costs[:3])) == 3 or len(set(costs[3:])) == 3 for costs in rows), rows
