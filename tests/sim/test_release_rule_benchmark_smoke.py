"""The release-rule diagnostic runs end to end on a small trace, and forbidding idling on on-demand changes costs."""

from __future__ import annotations

import json
import random
from pathlib import Path


def short_runs_around_a_long_gap(steps: int) -> list[int]:
    """Runs of spot of 1-6 steps and gaps of 1-12, with a gap of 50 h early on: the job holds on-demand through it,
    and the plan may give it up to wait for spot."""
    rng, data, up = random.Random(0), [], True
    while len(data) < steps:
        data += [int(up)] * (rng.randint(1, 6) if up else rng.randint(1, 12))
        up = not up
        if 30 <= len(data) < 35:
            data += [0] * 300
    return data[:steps]


def test_release_rule_table_on_a_small_trace(tmp_path: Path, variant_table) -> None:
    trace = {"metadata": {"gap_seconds": 600}, "data": short_runs_around_a_long_gap(560)}  # 93 h: one 70 h job
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps(trace))
    rows = variant_table("release_rule.py", tmp_path)
    # as kept, never, within experience; without and with the market's history
    assert all(len(costs) == 6 for costs in rows)
    assert any(costs[0] != costs[1] for costs in rows), rows
