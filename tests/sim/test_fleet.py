"""Jobs of one market run at once and share what they see of spot (`spotrun.sim.fleet`, `simulate --fleet`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.policy import PlacementContext, get_policy
from spotrun.sim.engine import SimJob, run_job
from spotrun.sim.fleet import run_fleet
from spotrun.sim.market import Market
from spotrun.sim.sweep import policy_for, sweep

HOUR = 3600.0
STEP = 600.0
JOB = SimJob(6 * HOUR, 8 * HOUR, 0.2 * HOUR)


def _runs_market(zones: int, samples: int, seed: int) -> Market:
    """Runs of spot and gaps of 1-20 steps in each zone."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(zones):
        lengths = rng.integers(1, 21, size=samples)
        rows.append(np.concatenate([np.full(n, i % 2 == 0) for i, n in enumerate(lengths)])[:samples])
    return Market(tuple(f"z{i}" for i in range(zones)), np.stack(rows), STEP)


@dataclass
class FirstSight:
    """A policy that notes, at its first ask, what the shared log held then (the log itself goes on growing)."""

    inner: object
    name: str = "watched"
    lifetimes: list[float] | None = None
    last_seen: float = -math.inf
    known_now: bool | None = None
    asks: list[float] = field(default_factory=list)

    def decide(self, ctx: PlacementContext):
        if self.lifetimes is None:
            runs = ctx.spot_log().zone(ctx.zones[0])
            self.lifetimes, self.last_seen = list(runs.lifetimes), runs.last_seen
            self.known_now = ctx.spot_known_now(ctx.zones[0])
        self.asks.append(ctx.now)
        return self.inner.decide(ctx)

    def place(self, ctx: PlacementContext):
        return self.decide(ctx)


@pytest.mark.parametrize("name", ["default", "uniform_progress", "omniscient"])
def test_a_fleet_of_one_job_runs_as_the_job_alone(name):
    market, start = _runs_market(2, 200, seed=1), 30
    alone = run_job(policy_for(name, market, start, JOB), market.zones, market.available[:, start:], STEP, JOB,
                    observe="launches")
    fleet = run_fleet(lambda s: policy_for(name, market, s, JOB, s * STEP), market, [start], JOB)[start]
    assert (fleet.cost, fleet.finished_at, fleet.preemptions, fleet.launches, fleet.moves) == (
        alone.cost, alone.finished_at, alone.preemptions, alone.launches, alone.moves)
    assert fleet.met_deadline and fleet.finished_at <= JOB.deadline_seconds  # counted from the job's own start
    assert [a.created_at for a in fleet.attempts] == [a.created_at + start * STEP for a in alone.attempts]


def test_in_the_tick_view_a_fleet_that_never_leaves_the_market_unwatched_sees_all_the_trace_before_each_start():
    """Seeing every step while it runs, a job learns what the trace held before its start from the jobs before it,
    as long as one of them was running at every step: then it is the sweep with all the history."""
    markets = [("m", _runs_market(1, 400, seed=2))]
    every = 4 * HOUR  # a job runs at least its 6 h of compute: always one running
    fleet = sweep(markets, ["default"], JOB, every_seconds=every, processes=1, fleet=True)
    history = sweep(markets, ["default"], JOB, every_seconds=every, processes=1, history_seconds=math.inf)
    alone = sweep(markets, ["default"], JOB, every_seconds=every, processes=1)
    assert [r.cost for r in fleet] == [r.cost for r in history]
    assert [r.cost for r in fleet] != [r.cost for r in alone]


def test_a_job_starts_with_what_the_jobs_before_it_saw_and_nothing_later():
    market = Market(("z",), np.array([[True, True, True, False] * 50]), STEP)  # spot lasts 3 steps, again and again
    first, second = FirstSight(get_policy("greedy")), FirstSight(get_policy("greedy"))
    watchers = {0: first, 40: second}
    run_fleet(lambda s: watchers[s], market, [0, 40], JOB)
    assert first.lifetimes == []
    # the first job's spot instances, each lost after 3 steps, until its deadline made it take on-demand
    assert len(second.lifetimes) >= 3 and set(second.lifetimes) == {3 * STEP}
    assert second.last_seen <= 40 * STEP
    alone = FirstSight(get_policy("greedy"))
    run_job(alone, market.zones, market.available[:, 40:], STEP, JOB, observe="launches")
    assert alone.lifetimes == []


def test_a_job_knows_spot_is_there_where_another_job_holds_it():
    market = Market(("z",), np.ones((1, 120), dtype=bool), STEP)
    holder, newcomer = FirstSight(get_policy("greedy")), FirstSight(get_policy("on_demand"))
    watchers = {0: holder, 5: newcomer}
    results = run_fleet(lambda s: watchers[s], market, [0, 5], JOB)
    assert results[0].preemptions == 0 and results[0].launches == 1
    assert newcomer.known_now is True  # no try of its own: the holder's instance tells
    alone = FirstSight(get_policy("on_demand"))
    run_job(alone, market.zones, market.available[:, 5:], STEP, JOB, observe="launches")
    assert alone.known_now is None


def test_a_fleet_runs_every_job_to_its_end_on_the_markets_clock():
    market = _runs_market(1, 300, seed=3)
    starts = list(range(0, 250, 18))
    results = run_fleet(lambda s: policy_for("default", market, s, JOB, s * STEP), market, starts, JOB)
    assert sorted(results) == starts
    assert all(r.met_deadline for r in results.values())
    for start, result in results.items():
        assert all(start * STEP <= a.created_at <= (start + 48) * STEP for a in result.attempts)


@pytest.mark.parametrize(("starts", "message"), [
    ([3, 3], "distinct start offsets"), ([-1], "must lie in the trace"), ([10, 300], "must lie in the trace"),
])
def test_a_fleet_refuses_starts_it_cannot_run(starts, message):
    with pytest.raises(ValueError, match=message):
        run_fleet(lambda s: get_policy("greedy"), _runs_market(1, 300, seed=4), starts, JOB)


def test_a_fleet_sweep_takes_no_history_of_the_trace_too():
    with pytest.raises(ValueError, match="no history of the trace too"):
        sweep([("m", _runs_market(1, 300, seed=4))], ["default"], JOB, fleet=True, history_seconds=HOUR)


def _write_trace(path, data) -> None:
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))


def test_simulate_runs_a_fleet(tmp_path):
    # runs of spot and gaps of 1-4 steps: what the other jobs saw moves a job's plan away from the prior's
    lengths = np.random.default_rng(5).integers(1, 5, size=300)
    churn = np.concatenate([np.full(n, i % 2 == 0) for i, n in enumerate(lengths)])[:300]
    _write_trace(tmp_path / "a.json", churn.astype(int).tolist())
    common = ["simulate", "--trace", str(tmp_path), "--policy", "default", "--compute-hours", "6", "--deadline-hours",
              "8", "--every-hours", "4", "--observe", "launches", "--processes", "1", "--json"]
    alone, fleet = (json.loads(CliRunner().invoke(app, common + more).output) for more in ([], ["--fleet"]))
    assert (alone["fleet"], fleet["fleet"]) == (False, True)
    assert [p["runs"] for p in alone["policies"]] == [p["runs"] for p in fleet["policies"]]
    assert alone["policies"][0]["mean"] != fleet["policies"][0]["mean"]
    assert fleet["policies"][0]["misses"] == 0


def test_simulate_refuses_a_fleet_with_a_history_of_the_trace(tmp_path):
    _write_trace(tmp_path / "a.json", [1, 0] * 150)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--fleet", "--market-history-hours", "24"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "--fleet and --market-history-hours" in result.output


def test_a_fleet_sweep_spreads_markets_over_processes_with_the_same_results():
    markets = [(name, _runs_market(1, 300, seed=seed)) for name, seed in (("a", 6), ("b", 7))]
    one, two = (sweep(markets, ["default", "greedy"], JOB, every_seconds=4 * HOUR, observe="launches", processes=n,
                      fleet=True) for n in (1, 2))
    in_order = lambda records: sorted(records, key=lambda r: (r.market, r.policy, r.start))  # noqa: E731
    assert in_order(one) == in_order(two)
    assert {r.market for r in one} == {"a", "b"} and all(r.met_deadline for r in one)
