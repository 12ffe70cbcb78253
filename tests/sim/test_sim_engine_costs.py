"""The simulator's arithmetic and guarantees: billing per step, restart overheads, preemptions, deadlines."""

import json

import numpy as np
import pytest

from spotrun.policy import GreedyPolicy, Keep, Launch, OnDemandPolicy, Wait, get_policy
from spotrun.sim.engine import SimJob, run_job
from spotrun.sim.market import Market
from spotrun.sim.sweep import RunRecord, policy_for, summarize, sweep
from spotrun.traces import TraceError, Trace, load_trace

STEP = 600.0
OD_STEP = 3.06 * STEP / 3600
SPOT_STEP = 0.9731 * STEP / 3600


def test_on_demand_bills_every_started_step_including_the_restart_overhead():
    job = SimJob(compute_seconds=3600.0, deadline_seconds=5 * 3600.0, restart_overhead=360.0)
    result = run_job(OnDemandPolicy(), ("z",), np.ones((1, 40), bool), STEP, job)
    # 3600 s of work + 360 s overhead = 3960 s -> 7 steps, the last one billed whole
    assert result.cost == pytest.approx(7 * OD_STEP)
    assert result.finished_at == 7 * STEP and result.met_deadline
    assert result.launches == 1 and result.preemptions == 0 and result.switches == 0


def test_a_preemption_costs_a_restart_and_is_counted():
    job = SimJob(compute_seconds=4 * STEP, deadline_seconds=30 * STEP, restart_overhead=300.0)
    available = np.array([[1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1] + [1] * 20], bool)
    result = run_job(GreedyPolicy(), ("z",), available, STEP, job)
    # steps 0-1 on spot: 300 + 600 s of work; preempted at step 2 (idle); steps 3-5: 300 + 600 + 600 more
    assert result.preemptions == 1 and result.launches == 2
    assert result.finished_at == 6 * STEP
    assert result.cost == pytest.approx(5 * SPOT_STEP)
    assert [a.end_reason for a in result.attempts] == ["preempted", "succeeded"]


@pytest.mark.parametrize("step", [STEP, 300.0, 3600.0])
def test_the_on_demand_yardstick_is_what_on_demand_from_the_start_is_billed(step):
    # the compute plus overhead falls between two steps on each of these, so the last step is billed whole
    job = SimJob(compute_seconds=3 * 3600.0 + 100.0, deadline_seconds=10 * 3600.0, restart_overhead=410.0)
    market = Market.from_traces({"z": Trace(gap_seconds=step, data=np.ones(200, int))})
    records = sweep([("z", market)], ["on_demand", "greedy"], job, every_seconds=3 * step, processes=1)
    on_demand = [r for r in records if r.policy == "on_demand"]
    assert on_demand and all(r.normalized_cost == pytest.approx(r.on_demand_from_start) for r in on_demand)
    assert {r.on_demand_from_start for r in records} == {on_demand[0].on_demand_from_start}
    [summary] = summarize(records, ["on_demand"])
    assert summary.dearer_than_on_demand == 0.0 and summary.worst == pytest.approx(on_demand[0].normalized_cost)


def test_the_summary_counts_the_runs_dearer_than_on_demand_and_the_worst():
    def run(cost: float) -> RunRecord:
        return RunRecord(
            policy="p", market="m", start=0, cost=cost, normalized_cost=cost, met_deadline=True,
            on_demand_from_start=1.0, preemptions=0, switches=0, moves=0,
        )

    [summary] = summarize([run(0.5), run(1.02), run(1.0), run(0.9), run(1.3)], ["p"])
    assert summary.dearer_than_on_demand == pytest.approx(2 / 5)  # costing what on-demand does is not dearer
    assert summary.worst == 1.3 and summary.p90 < summary.worst


def test_work_done_as_the_columns_run_out_is_done_by_the_deadline():
    # a sweep's last start has exactly the deadline's columns; a plan that uses all of them finishes at the deadline
    # (omniscient idling first, then on-demand), and was reported as a miss
    job = SimJob(compute_seconds=6 * STEP, deadline_seconds=8 * STEP, restart_overhead=0.0)

    class LateOnDemand:
        """Waits two steps, then runs on on-demand."""

        name = "late"

        def place(self, ctx):
            return Wait(2 * STEP, "first a wait") if ctx.now < 2 * STEP else Launch("z", "on-demand", "late")

        def decide(self, ctx):
            return Keep("on it") if ctx.current is not None else self.place(ctx)

    result = run_job(LateOnDemand(), ("z",), np.zeros((1, 8), bool), STEP, job)
    assert result.finished_at == 8 * STEP and result.met_deadline
    assert [a.end_reason for a in result.attempts] == ["succeeded"]
    cut = run_job(LateOnDemand(), ("z",), np.zeros((1, 7), bool), STEP, job)
    assert cut.finished_at is None and not cut.met_deadline  # the columns ran out with work left
    assert [a.end_reason for a in cut.attempts] == ["cancelled"]


def test_the_policies_weigh_the_prices_the_run_is_given():
    # spot at 95% of on-demand on a market that takes it back every fourth step: each restart costs more than spot
    # saves, so the deadline-aware policy stays on on-demand (it planned with p3.2xlarge's 32% and chased spot)
    job = SimJob(compute_seconds=10 * 3600.0, deadline_seconds=14 * 3600.0, restart_overhead=360.0, spot_price=2.9)
    available = np.array([[1, 1, 1, 0] * 60], bool)
    on_demand = run_job(OnDemandPolicy(), ("z",), available, STEP, job)
    default = run_job(get_policy("default"), ("z",), available, STEP, job)
    assert default.met_deadline and default.cost == pytest.approx(on_demand.cost) and default.preemptions == 0


def test_normalized_cost_of_all_spot_is_the_price_ratio():
    job = SimJob(compute_seconds=10 * STEP, deadline_seconds=20 * STEP, restart_overhead=0.0)
    result = run_job(GreedyPolicy(), ("z",), np.ones((1, 30), bool), STEP, job)
    assert result.cost / job.on_demand_cost == pytest.approx(0.9731 / 3.06)


@pytest.mark.parametrize("observe", ["tick", "launches"])
@pytest.mark.parametrize("name", ["on_demand", "greedy", "uniform_progress", "default", "omniscient"])
def test_no_policy_misses_a_deadline_that_on_demand_from_the_start_meets(name, observe):
    rng = np.random.default_rng(3)
    for trial in range(4):
        flips = rng.random(400) < rng.choice([0.05, 0.2, 0.5])
        available = (np.cumsum(flips) % 2 == 0)[None, :] | (rng.random((1, 400)) < 0.1 * trial)
        market = Market(("z",), available, STEP)
        # on-demand from the start needs ceil((C + d) / step) = 61 of the 66 steps: 5 steps of slack
        job = SimJob(compute_seconds=60 * STEP - 360, deadline_seconds=66 * STEP, restart_overhead=720.0)
        result = run_job(policy_for(name, market, 0, job), ("z",), available, STEP, job, observe=observe)
        assert result.met_deadline, (name, observe, trial)


def test_a_wait_is_kept_until_its_time_as_the_controller_keeps_it():
    class WaitThreeSteps:
        """Waits 3 steps at its first question, then runs on-demand; notes when it is asked."""

        name = "wait three steps"

        def __init__(self) -> None:
            self.asked: list[float] = []

        def decide(self, ctx):
            self.asked.append(ctx.now)
            if ctx.current is not None:
                return Keep("running")
            if len(self.asked) == 1:
                return Wait(ctx.now + 3 * STEP, "waiting")
            return Launch("z", "on-demand", "now")

    policy = WaitThreeSteps()
    job = SimJob(compute_seconds=2 * STEP, deadline_seconds=20 * STEP, restart_overhead=0.0)
    result = run_job(policy, ("z",), np.ones((1, 20), bool), STEP, job)
    assert policy.asked[:2] == [0.0, 3 * STEP]  # not asked at steps 1 and 2
    assert result.finished_at == 5 * STEP and result.cost == pytest.approx(2 * OD_STEP)


def test_the_launches_model_learns_no_capacity_by_trying():
    job = SimJob(compute_seconds=2 * STEP, deadline_seconds=20 * STEP, restart_overhead=0.0)
    available = np.array([[0, 0, 1, 1, 1] + [1] * 20], bool)
    result = run_job(GreedyPolicy(), ("z",), available, STEP, job, observe="launches")
    assert [a.end_reason for a in result.attempts] == ["no_capacity", "no_capacity", "succeeded"]
    assert result.cost == pytest.approx(2 * SPOT_STEP)


def test_the_launches_model_knows_spot_was_there_until_it_let_its_spot_instance_go():
    class SpotThenRelease:
        name = "spot then release"
        seen: list = []

        def place(self, ctx):
            return self.decide(ctx)

        def decide(self, ctx):
            runs = ctx.spot_log().zone("z")
            self.seen.append((runs.available, runs.last_seen))
            step = round(ctx.now / STEP)
            if step == 0:
                return Launch("z", "spot", "try")
            return Keep("run") if step < 3 else Wait(ctx.now + STEP, "let it go")

    job = SimJob(compute_seconds=20 * STEP, deadline_seconds=30 * STEP, restart_overhead=0.0)
    run_job(SpotThenRelease(), ("z",), np.ones((1, 6), bool), STEP, job, observe="launches")
    assert SpotThenRelease.seen[4] == (True, 3 * STEP)  # released at step 3, spot up until then


class OnDemandThenTrySpot:
    """On-demand from the start; at step 2 asks for spot, and takes on-demand whenever spot is refused."""

    name = "on-demand then spot"

    def place(self, ctx):
        return self.decide(ctx)

    def decide(self, ctx):
        refused_now = any(a.end_reason == "no_capacity" and a.ended_at == ctx.now for a in ctx.history)
        if round(ctx.now / STEP) == 2 and not refused_now:
            return Launch("z", "spot", "try spot")
        if ctx.current is not None:
            return Keep("run")
        return Launch("z", "on-demand", "on-demand")


@pytest.mark.parametrize("observe", ["launches", "drain-first"])
def test_a_refused_move_keeps_the_instance_unless_moves_drain_first(observe):
    job = SimJob(compute_seconds=6 * STEP, deadline_seconds=30 * STEP, restart_overhead=480.0)
    result = run_job(OnDemandThenTrySpot(), ("z",), np.zeros((1, 30), bool), STEP, job, observe=observe)
    reasons = [(a.market, a.end_reason) for a in result.attempts]
    if observe == "launches":  # spot is tried first; refused, the on-demand instance runs on
        assert reasons == [("spot", "no_capacity"), ("on-demand", "succeeded")]
        assert result.launches == 1 and result.finished_at == 7 * STEP  # 6 steps of work + 480 s once
    else:  # the on-demand instance is given up first: the refusal costs a second start
        assert reasons == [("on-demand", "moved"), ("spot", "no_capacity"), ("on-demand", "succeeded")]
        assert result.launches == 2 and result.finished_at == 8 * STEP  # 480 s twice
    assert result.cost == pytest.approx(round(result.finished_at / STEP) * OD_STEP)


def test_multi_zone_default_moves_to_the_zone_that_has_spot():
    job = SimJob(compute_seconds=20 * STEP, deadline_seconds=60 * STEP, restart_overhead=60.0)
    a = np.array([1] * 5 + [0] * 95, bool)
    b = np.array([0] * 3 + [1] * 97, bool)
    result = run_job(get_policy("default"), ("a", "b"), np.stack([a, b]), STEP, job)
    assert result.met_deadline and result.moves >= 1
    assert {x.zone for x in result.attempts if x.started_at is not None} == {"a", "b"}


def test_market_windows_and_mismatched_traces():
    market = Market.from_traces({"a": Trace(600.0, np.array([1, 0, 1, 1])), "b": Trace(600.0, np.array([0, 0, 1]))})
    assert market.available.shape == (2, 3)
    assert market.starts(every_seconds=600.0, span_seconds=1200.0) == [0, 1]
    with pytest.raises(TraceError, match="different sample periods"):
        Market.from_traces({"a": Trace(600.0, np.array([1])), "b": Trace(300.0, np.array([1]))})
    with pytest.raises(ValueError, match="outside"):
        market.window(2, 5)


def test_bad_jobs_are_refused():
    with pytest.raises(ValueError, match="compute_seconds"):
        SimJob(compute_seconds=0, deadline_seconds=10, restart_overhead=0)
    with pytest.raises(ValueError, match="restart_overhead"):
        SimJob(compute_seconds=1, deadline_seconds=10, restart_overhead=-1)
    with pytest.raises(ValueError, match="max spot price must be positive"):
        SimJob(compute_seconds=1, deadline_seconds=10, restart_overhead=0, max_price=0)


@pytest.mark.parametrize("observe", ["tick", "launches"])
def test_spot_above_the_max_price_is_refused_wherever_it_has_capacity(observe):
    """The live provider refuses a spot launch whose max price is below the spot price ("price too low"); the
    default cap is the on-demand price. Such a job runs on on-demand, however much spot the trace has, and, told the
    price as the live controller tells it, does not ask for spot."""
    available = np.ones((1, 30), bool)
    capped = SimJob(compute_seconds=4 * STEP, deadline_seconds=20 * STEP, restart_overhead=0.0, max_price=0.5)
    assert capped.spot_price > 0.5 and not capped.spot_within_max_price
    result = run_job(GreedyPolicy(), ("z",), available, STEP, capped, observe=observe)
    assert result.spot_seconds == 0 and result.cost == pytest.approx(4 * OD_STEP)
    assert [attempt.market for attempt in result.attempts] == ["on-demand"]
    omniscient = policy_for("omniscient", Market(("z",), available, STEP), 0, capped)
    assert run_job(omniscient, ("z",), available, STEP, capped, observe=observe).cost == pytest.approx(4 * OD_STEP)
    # spot dearer than on-demand is refused under the default cap; a cap above its price takes it
    dear = SimJob(compute_seconds=4 * STEP, deadline_seconds=20 * STEP, restart_overhead=0.0, spot_price=4.0)
    assert run_job(GreedyPolicy(), ("z",), available, STEP, dear, observe=observe).spot_seconds == 0
    allowed = SimJob(compute_seconds=4 * STEP, deadline_seconds=20 * STEP, restart_overhead=0.0, spot_price=4.0,
                     max_price=4.0)
    assert run_job(GreedyPolicy(), ("z",), available, STEP, allowed, observe=observe).spot_seconds == 4 * STEP


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json at all", "not valid JSON"),
        (json.dumps({"metadata": {"gap_seconds": 600}, "data": []}), "'data' is empty"),
        (json.dumps({"metadata": {"gap_seconds": 600}}), "missing 'data'"),
        (json.dumps({"metadata": {"gap_seconds": -600}, "data": [1]}), "must be a positive number"),
    ],
)
def test_bad_trace_files_name_the_file(tmp_path, content, message):
    path = tmp_path / "zone-x.json"
    path.write_text(content)
    with pytest.raises(TraceError, match=message) as caught:
        load_trace(path)
    assert str(path) in str(caught.value)


def test_billed_as_ec2_a_spot_instance_taken_back_within_its_first_hour_is_free():
    from dataclasses import replace

    from spotrun.costs.billing import CLOUD_RULES

    # spot for 5 steps (50 min), gone one step, back for 7 (70 min), gone, back for good: greedy runs three instances
    available = np.array([[1] * 5 + [0] + [1] * 7 + [0] + [1] * 30], bool)
    job = SimJob(compute_seconds=14 * STEP, deadline_seconds=40 * STEP, restart_overhead=300.0)
    per_step = run_job(GreedyPolicy(), ("z",), available, STEP, job)
    as_ec2 = run_job(GreedyPolicy(), ("z",), available, STEP, replace(job, billing=CLOUD_RULES["aws"]))
    assert [a.end_reason for a in as_ec2.attempts] == [a.end_reason for a in per_step.attempts] == [
        "preempted", "preempted", "succeeded"]
    assert per_step.spot_seconds == as_ec2.spot_seconds
    # the first instance's 5 steps are not charged; the second, taken back after 70 min, is, as is the last
    assert per_step.cost - as_ec2.cost == pytest.approx(5 * SPOT_STEP)
    as_gcp = run_job(GreedyPolicy(), ("z",), available, STEP, replace(job, billing=CLOUD_RULES["gcp"]))
    assert as_gcp.cost == pytest.approx(per_step.cost)  # whole steps are over GCE's minute already
