"""`make demo` picks where in the bundled traces its market starts: an offset where the live policy meets three
preemptions under every timing the job may take on this machine. The job's expected compute is its steps' sleeps
plus the reference run's own training time, which a fast machine makes short: the job file must leave the search a
margin, or the demo fails on fast machines (it did, with 0.04 s per step: no offset below ~29 s of compute)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from spotrun.control.placement import policy_prices
from spotrun.providers.local import ZONES
from spotrun.spec import load_spec

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
TRAIN_EXAMPLES = 1437  # load_digits' 1,797 images less the 20% test split (train.py)
BATCH_SIZE = 64


def load_demo():
    spec = importlib.util.spec_from_file_location("digits_demo", DIGITS / "demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["digits_demo"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("training_seconds", [0.0, 1.0, 5.0, 20.0])  # the reference run's own loop, fast to slow
def test_the_demo_finds_an_offset_that_gives_its_preemptions_under_every_timing(training_seconds, capsys):
    demo = load_demo()
    job = load_spec(DIGITS / "job.yaml")
    steps = int(job.env["EPOCHS"]) * math.ceil(TRAIN_EXAMPLES / BATCH_SIZE)
    compute = steps * float(job.env["STEP_SECONDS"]) + training_seconds
    demo.pick_trace_offset(compute, policy_prices(job, zones=ZONES))
    assert "no offset gives" not in capsys.readouterr().out  # not the fallback: every timing variant meets them
