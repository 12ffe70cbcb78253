"""The market's history before a start: what the simulator shows the policy, and what the policy makes of it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from spotrun.policy import DeadlineAwarePolicy, PlacementContext, SpotLog, get_policy
from spotrun.sim.engine import SimJob, run_job
from spotrun.sim.market import Market
from spotrun.sim.sweep import SweepTask, history_before, sweep

HOUR = 3600.0
STEP = 600.0


class FirstAsk:
    """A policy that keeps what `inner` was shown at its first ask and what it answered."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name
        self.log: SpotLog | None = None
        self.reason = ""

    def decide(self, ctx: PlacementContext):
        decision = self.inner.decide(ctx)
        if self.log is None:
            self.log, self.reason = ctx.spot_log(), decision.reason
        return decision

    def place(self, ctx: PlacementContext):
        return self.decide(ctx)


def _blips(runs: int) -> np.ndarray:
    """`runs` runs of spot of one step, each after a gap of one step: a market where spot always dies at once."""
    return np.array([[True, False] * runs])


def test_the_history_goes_into_the_spot_log_before_the_first_step():
    watcher = FirstAsk(get_policy("on_demand"))
    history = np.array([[True, True, True, False, False, True]])  # up 3 steps, down 2, up again
    run_job(watcher, ("z",), np.ones((1, 4), dtype=bool), STEP, SimJob(HOUR, 2 * HOUR, 0.0), seen_before=history)
    runs = watcher.log.zone("z")
    assert runs.lifetimes == [3 * STEP] and runs.gaps == [2 * STEP]
    assert runs.available is True and runs.since == -STEP  # the run going on began one step before the start


def test_without_history_the_log_begins_at_the_start():
    watcher = FirstAsk(get_policy("on_demand"))
    run_job(watcher, ("z",), np.ones((1, 4), dtype=bool), STEP, SimJob(HOUR, 2 * HOUR, 0.0))
    runs = watcher.log.zone("z")
    assert runs.lifetimes == [] and runs.gaps == [] and runs.since == 0.0


def test_a_history_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="history must be"):
        run_job(get_policy("on_demand"), ("a", "b"), np.ones((2, 4), dtype=bool), STEP, SimJob(HOUR, 2 * HOUR, 0.0),
                seen_before=np.ones((1, 3), dtype=bool))


def test_the_sweep_shows_the_hours_asked_for_and_never_the_future():
    market = Market(("z",), np.arange(40)[None, :] % 3 == 0, STEP)
    task = SweepTask("m", market, start=30)
    assert history_before(task, 0.0) is None
    assert history_before(task, 2 * HOUR).shape == (1, 12)
    np.testing.assert_array_equal(history_before(task, 2 * HOUR), market.available[:, 18:30])
    assert history_before(task, math.inf).shape == (1, 30)
    assert history_before(SweepTask("m", market, start=0), math.inf) is None


def _fresh_spot_life(reason: str) -> float:
    return float(re.search(r"fresh spot lasts ~([\d.]+) h", reason).group(1))


def test_the_deadline_aware_policy_learns_the_market_from_its_history():
    """Two hundred one-step runs of spot on record: the fitted model expects fresh spot to die at once, where the
    prior alone (nothing seen yet) expects it to last hours."""
    job = SimJob(10 * HOUR, 14 * HOUR, 0.1 * HOUR)
    now = np.ones((1, 100), dtype=bool)
    with_history, without = FirstAsk(DeadlineAwarePolicy()), FirstAsk(DeadlineAwarePolicy())
    assert run_job(with_history, ("z",), now, STEP, job, seen_before=_blips(200)).met_deadline
    assert run_job(without, ("z",), now, STEP, job).met_deadline
    assert _fresh_spot_life(without.reason) > 1.0
    assert _fresh_spot_life(with_history.reason) < 0.5


def test_history_in_a_sweep_changes_what_default_does_and_nothing_else():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 30, size=400)
    trace = np.concatenate([np.full(n, i % 2 == 0) for i, n in enumerate(lengths)])[:2000]
    markets = [("m", Market(("z",), trace[None, :], STEP))]
    job = SimJob(20 * HOUR, 26 * HOUR, 0.2 * HOUR)
    plain = sweep(markets, ["uniform_progress", "default"], job, every_seconds=24 * HOUR, processes=1)
    seen = sweep(markets, ["uniform_progress", "default"], job, every_seconds=24 * HOUR, processes=1,
                 history_seconds=math.inf)
    by_policy = lambda records, name: [r.cost for r in records if r.policy == name]  # noqa: E731
    assert by_policy(plain, "uniform_progress") == by_policy(seen, "uniform_progress")  # UP learns nothing
    assert by_policy(plain, "default") != by_policy(seen, "default")
    assert all(r.met_deadline for r in seen)
