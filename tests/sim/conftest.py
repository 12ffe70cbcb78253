"""Fixtures of the simulator's tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest


@pytest.fixture
def small_trace_folder(tmp_path: Path) -> Path:
    """A folder holding one trace of runs of spot and gaps of 1-40 steps of 600 s: 93 h, room for one 70 h job."""
    rng, data, up = random.Random(3), [], True
    while len(data) < 560:
        data += [int(up)] * rng.randint(1, 40)
        up = not up
    (tmp_path / "zone-a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data[:560]}))
    return tmp_path
