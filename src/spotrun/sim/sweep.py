"""Run policies from many start offsets along the traces and summarize them (the policy benchmark).

Every run of every policy is independent, so the sweep spreads (market, start) pairs over worker processes; within a
run the policy is asked once per trace step, exactly as `engine.run_job` does for a single job. In a fleet sweep the
jobs of one market share what they see (`fleet`), so a market's jobs run together in one process, a policy at a time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np

from spotrun.policy import StepPolicy, get_policy
from spotrun.policy.omniscient import OmniscientPolicy, Problem
from spotrun.sim.engine import Observe, RunResult, SimJob, run_job
from spotrun.sim.fleet import run_fleet
from spotrun.sim.heap import keep_freed_memory
from spotrun.sim.market import Market

OMNISCIENT = "omniscient"
UNIFORM_PROGRESS = "uniform_progress"


@dataclass(frozen=True)
class RunRecord:
    policy: str
    market: str
    start: int  # sample offset in the traces
    cost: float
    normalized_cost: float
    met_deadline: bool
    # what on-demand from the start costs the same job, normalized alike: a spot policy's run may cost more
    on_demand_from_start: float
    preemptions: int
    switches: int
    moves: int


@dataclass(frozen=True)
class PolicySummary:
    policy: str
    runs: int
    mean: float
    median: float
    p90: float
    worst: float
    dearer_than_on_demand: float  # the share of runs that cost more than on-demand from the start would have
    misses: int
    preemptions: float  # per run, mean
    switches: float
    moves: float

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


@dataclass(frozen=True)
class SweepTask:
    label: str
    market: Market
    start: int


def policy_for(name: str, market: Market, start: int, job: SimJob, started: float = 0.0) -> StepPolicy:
    """The policy `name` for the job from sample `start` (omniscient plans it; `started`: its start on the clock the
    run asks on)."""
    if name == OMNISCIENT:
        problem = Problem(
            available=job.spot_it_can_have(market.window(start, _deadline_steps(job, market)), market.zones),
            step=market.gap_seconds,
            compute=job.compute_seconds,
            deadline=job.deadline_seconds,
            overhead=job.restart_overhead,
            spot_price=job.spot_price,
            on_demand_price=job.on_demand_price,
            zone_spot_prices=tuple(job.spot_price_in(zone) for zone in market.zones) if job.zone_spot_prices else (),
        )
        return OmniscientPolicy.plan(problem, market.zones, started)
    return get_policy(name)


def _deadline_steps(job: SimJob, market: Market) -> int:
    return int(math.floor(job.deadline_seconds / market.gap_seconds + 1e-9))


def run_one(
    task: SweepTask, policies: Sequence[str], job: SimJob, observe: Observe, history_seconds: float = 0.0
) -> list[RunRecord]:
    """Every policy from the task's start; each sees the `history_seconds` of the trace before it (inf: all)."""
    records = []
    available = task.market.available[:, task.start :]
    seen_before = history_before(task, history_seconds)
    for name in policies:
        policy = policy_for(name, task.market, task.start, job)
        result = run_job(
            policy, task.market.zones, available, task.market.gap_seconds, job, observe=observe, seen_before=seen_before
        )
        records.append(_record(name, task, result, job))
    return records


def history_before(task: SweepTask, history_seconds: float) -> np.ndarray | None:
    if history_seconds <= 0 or task.start == 0:
        return None
    steps = task.start if math.isinf(history_seconds) else int(history_seconds // task.market.gap_seconds)
    return task.market.available[:, max(task.start - steps, 0) : task.start]


def _record(name: str, task: SweepTask, result: RunResult, job: SimJob) -> RunRecord:
    return RunRecord(
        policy=name, market=task.label, start=task.start, cost=result.cost,
        normalized_cost=result.cost / job.on_demand_cost, met_deadline=result.met_deadline,
        on_demand_from_start=job.on_demand_from_start_cost(task.market.gap_seconds) / job.on_demand_cost,
        preemptions=result.preemptions, switches=result.switches, moves=result.moves,
    )


def sweep_tasks(markets: Sequence[tuple[str, Market]], job: SimJob, every_seconds: float) -> list[SweepTask]:
    return [
        SweepTask(label, market, start)
        for label, market in markets
        for start in market.starts(every_seconds, job.deadline_seconds)
    ]


def checked_tasks(
    markets: Sequence[tuple[str, Market]], job: SimJob, every_seconds: float, *, history_seconds: float = 0.0,
    fleet: bool = False,
) -> list[SweepTask]:
    """The runs' starts of a `sweep` with these arguments; ValueError, before any run, for one that cannot be run as
    asked (a deadline no policy could meet, no start offset that fits, a fleet given a history)."""
    if fleet and history_seconds > 0:
        raise ValueError("a fleet's jobs learn the market from each other: it takes no history of the trace too")
    for _, market in markets:
        job.check_can_finish(market.gap_seconds)
    tasks = sweep_tasks(markets, job, every_seconds)
    if not tasks:
        raise ValueError("no start offset fits: the traces are shorter than the deadline")
    return tasks


def sweep(
    markets: Sequence[tuple[str, Market]],
    policies: Sequence[str],
    job: SimJob,
    *,
    every_seconds: float = 6 * 3600,
    observe: Observe = "tick",
    processes: int | None = None,
    history_seconds: float = 0.0,
    fleet: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[RunRecord]:
    """Every policy from every start offset (every `every_seconds`) of every market; one record per run. Policies
    see the `history_seconds` of the market before each start (inf: all of it), as a platform that keeps watching
    its markets would have it (`engine.run_job`'s `seen_before`), or, with `fleet`, what the jobs of the same
    policy that started before them in the market saw (`fleet.run_fleet`). `on_progress(runs done, runs in all)` is
    called once before the first run and again as each start (each market, in a fleet) is done, in the order they
    were laid out."""
    tasks = checked_tasks(markets, job, every_seconds, history_seconds=history_seconds, fleet=fleet)
    if fleet:
        work, run = [(label, market, _task_starts(tasks, label)) for label, market in markets], _run_fleets_packed
        packed = [(*item, tuple(policies), job, observe) for item in work if item[2]]
    else:
        run = _run_one_packed
        packed = [(t, tuple(policies), job, observe, history_seconds) for t in tasks]
    workers = processes if processes is not None else min(os.cpu_count() or 1, len(packed))
    runs = len(tasks) * len(policies)
    if workers <= 1:
        keep_freed_memory()
        return _gathered((run(args) for args in packed), runs, on_progress)
    chunk = max(1, len(packed) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers, initializer=keep_freed_memory) as pool:
        return _gathered(pool.map(run, packed, chunksize=chunk), runs, on_progress)


def _gathered(
    batches: Iterable[list[RunRecord]], runs: int, on_progress: Callable[[int, int], None] | None
) -> list[RunRecord]:
    records: list[RunRecord] = []
    if on_progress is not None:
        on_progress(0, runs)
    for batch in batches:
        records += batch
        if on_progress is not None:
            on_progress(len(records), runs)
    return records


def _task_starts(tasks: Sequence[SweepTask], label: str) -> tuple[int, ...]:
    return tuple(task.start for task in tasks if task.label == label)


def run_fleets(
    label: str, market: Market, starts: Sequence[int], policies: Sequence[str], job: SimJob, observe: Observe,
) -> list[RunRecord]:
    """Each policy's fleet of jobs from `starts` in one market (policies do not share logs with each other)."""
    records = []
    for name in policies:
        results = run_fleet(partial(_fleet_policy, name, market, job), market, starts, job, observe=observe)
        records += [_record(name, SweepTask(label, market, start), results[start], job) for start in starts]
    return records


def _fleet_policy(name: str, market: Market, job: SimJob, start: int) -> StepPolicy:
    return policy_for(name, market, start, job, start * market.gap_seconds)


def _run_fleets_packed(args: tuple[str, Market, tuple[int, ...], tuple[str, ...], SimJob, Observe]) -> list[RunRecord]:
    return run_fleets(*args)


def _run_one_packed(args: tuple[SweepTask, tuple[str, ...], SimJob, Observe, float]) -> list[RunRecord]:
    return run_one(*args)


def gap_closed(baseline: float, best: float, cost: float) -> float:
    """The share of the gap between a baseline's mean cost and the best one that `cost` closes (nan: no gap)."""
    return (baseline - cost) / (baseline - best) if baseline - best > 1e-12 else math.nan


def gaps_closed(summaries: Sequence[PolicySummary]) -> dict[str, float]:
    """Each policy's share of the uniform_progress → omniscient gap, when both ran (the issue's yardstick); nan for
    a policy that missed a deadline: the gap is between plans that keep them, and a miss can cost less than both."""
    means = {s.policy: s.mean for s in summaries}
    if UNIFORM_PROGRESS not in means or OMNISCIENT not in means:
        return {}
    return {
        s.policy: math.nan if s.misses else gap_closed(means[UNIFORM_PROGRESS], means[OMNISCIENT], s.mean)
        for s in summaries
    }


def summarize(records: Sequence[RunRecord], policies: Sequence[str]) -> list[PolicySummary]:
    summaries = []
    for name in policies:
        mine = [r for r in records if r.policy == name]
        if not mine:
            continue
        costs = np.array([r.normalized_cost for r in mine])
        on_demand = np.array([r.on_demand_from_start for r in mine])
        summaries.append(PolicySummary(
            policy=name, runs=len(mine), mean=float(costs.mean()), median=float(np.median(costs)),
            p90=float(np.percentile(costs, 90)), worst=float(costs.max()),
            dearer_than_on_demand=float(np.mean(costs > on_demand * (1 + 1e-9))),
            misses=sum(not r.met_deadline for r in mine),
            preemptions=float(np.mean([r.preemptions for r in mine])),
            switches=float(np.mean([r.switches for r in mine])), moves=float(np.mean([r.moves for r in mine])),
        ))
    return summaries


def summarize_by_market(records: Sequence[RunRecord], policies: Sequence[str]) -> dict[str, list[PolicySummary]]:
    """`summarize` for each market on its own, in the order the records name them."""
    by_market: dict[str, list[RunRecord]] = {}
    for record in records:
        by_market.setdefault(record.market, []).append(record)
    return {market: summarize(mine, policies) for market, mine in by_market.items()}
