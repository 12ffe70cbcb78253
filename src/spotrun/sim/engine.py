"""Run one job through a simulated market with any policy, step by step (the paper simulator's model).

Each step t (of the traces' sample period):
1. a spot instance that ran in step t-1 is lost if its zone has no spot in step t (a preemption);
2. the job is done if its progress reached the compute it needs;
3. the policy is asked (`decide`). A Launch of spot where there is no capacity is answered "no capacity" (recorded
   as the live controller would) and the policy is asked again, at most once per zone and market per step;
4. the instance held runs the step: billed whole; progress is the step minus what is left of its restart overhead.
A policy that answers Wait(until) while the job holds nothing is not asked again before `until`, as the controller
does not place a waiting job before it.

What the policy sees of spot: ``observe="tick"`` (the paper's model) tells it every zone's availability in step t;
``observe="launches"`` tells it only what the live controller can learn: its own launches (success or "no
capacity"), the spot instance it holds, and preemptions. In both, a move tries the new instance first and gives up
the one held only once the new one runs, as the live controller's make-before-break moves do. ``observe="drain-first"``
is "launches" with drain-first moves (the instance held is given up before the next is launched, so a move refused
for lack of spot leaves nothing held): what moving costs a platform that cannot hold two instances at once.

`run_job` runs one job alone; `fleet` runs many in one market, sharing what they see, with the same `JobRun`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from spotrun.costs.billing import BillingRule
from spotrun.policy import (
    GiveUp, Keep, Launch, PastAttempt, Placement, PlacementContext, SpotLog, StepPolicy, Wait, max_spot_price,
)
from spotrun.policy.placement import within_cap
from spotrun.sim.prices import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT

Observe = Literal["tick", "launches", "drain-first"]
OBSERVE_MODES: tuple[Observe, ...] = get_args(Observe)


@dataclass(frozen=True)
class SpotSettings:
    """The job's spot settings a policy reads (a job file's spot.use_spot, fallback, preemptions_before_fallback and
    fallback_window). The defaults are what the policy rows of a sweep assume: spot allowed, on-demand as fallback."""

    use_spot: bool = True
    fallback: Literal["on-demand", "wait"] = "on-demand"
    preemptions_before_fallback: int = 3
    fallback_window: float = 3600.0

    @property
    def as_assumed(self) -> bool:
        """Whether a policy that follows the job's settings places it as the rows assume (spot, falling back to
        on-demand); the fallback's trigger counts only for jobs placed without a deadline plan."""
        return self.use_spot and self.fallback == "on-demand"


@dataclass(frozen=True)
class SimJob:
    compute_seconds: float  # C
    deadline_seconds: float  # D, after the start
    restart_overhead: float  # d
    on_demand_price: float = P3_2XLARGE_ON_DEMAND  # $/h
    spot_price: float = P3_2XLARGE_SPOT  # $/h
    max_price: float | None = None  # $/h a spot launch bids at most; None: the on-demand price, as live
    settings: SpotSettings = SpotSettings()
    # (zone, $/h) where a zone's spot costs other than `spot_price`, as EC2 prices each zone's spot apart
    zone_spot_prices: tuple[tuple[str, float], ...] = ()
    # how each instance's steps are charged when it ends (`costs.billing`: AWS's free first-hour interruption);
    # None: every step billed whole, the paper's model
    billing: BillingRule | None = None

    def __post_init__(self) -> None:
        for name in ("compute_seconds", "deadline_seconds", "on_demand_price", "spot_price"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.restart_overhead < 0:
            raise ValueError(f"restart_overhead must be >= 0, got {self.restart_overhead}")
        for zone, price in self.zone_spot_prices:
            if not price > 0:
                raise ValueError(f"the spot price in {zone} must be positive, got {price}")
        max_spot_price(self.on_demand_price, self.max_price)  # refuses a cap that is not positive

    def spot_price_in(self, zone: str) -> float:
        """$/h of spot in `zone`."""
        return dict(self.zone_spot_prices).get(zone, self.spot_price)

    @property
    def spot_within_max_price(self) -> bool:
        """Whether a spot launch bidding the max price is taken at the spot price where no zone's own is given."""
        return self._within_cap(self.spot_price)

    def spot_within_max_price_in(self, zone: str) -> bool:
        """Whether a spot launch in `zone` bidding the max price is taken: prices are constant here, so spot above
        the cap is refused there for the whole run (the live provider's "price too low"), whenever it has capacity."""
        return self._within_cap(self.spot_price_in(zone))

    def _within_cap(self, price: float) -> bool:
        return within_cap(price, max_spot_price(self.on_demand_price, self.max_price))

    def spot_refusal_in(self, zone: str) -> str:
        """Why a spot launch in `zone` where the trace has no spot is refused, as the live controller records it."""
        return "no_capacity" if self.spot_within_max_price_in(zone) else "price_too_low"

    def spot_it_can_have(self, available: np.ndarray, zones: tuple[str, ...]) -> np.ndarray:
        """The availability this job sees (zones × steps): the market's, none in a zone whose spot costs more than
        its max price."""
        priced_out = [i for i, zone in enumerate(zones) if not self.spot_within_max_price_in(zone)]
        if not priced_out:
            return available
        seen = np.array(available, dtype=bool)
        seen[priced_out] = False
        return seen

    def policy_prices(self, zones: tuple[str, ...]) -> dict:
        """The prices a policy is told, as the live controller tells them (`PlacementContext`'s fields)."""
        return {
            "spot_price": self.spot_price, "on_demand_price": self.on_demand_price,
            "spot_prices": {zone: self.spot_price_in(zone) for zone in zones} if self.zone_spot_prices else {},
            "max_spot_price": max_spot_price(self.on_demand_price, self.max_price),
        }

    def check_can_finish(self, step: float) -> None:
        """Refuse a deadline that on-demand from the start would miss: time moves in whole steps, so it must leave
        the compute plus one restart overhead, rounded up to whole steps."""
        needed = self.on_demand_from_start_seconds(step)
        if self.deadline_seconds < needed - 1e-6:
            raise ValueError(
                f"the deadline ({self.deadline_seconds / 3600:g} h) is sooner than on-demand from the start could "
                f"finish: the compute plus one restart overhead in whole {step / 60:g}-minute steps takes "
                f"{needed / 3600:g} h, so every policy would miss it"
            )

    def on_demand_from_start_seconds(self, step: float) -> float:
        """How long on-demand from the start takes, billed: the compute plus one restart overhead, in whole steps."""
        return math.ceil((self.compute_seconds + self.restart_overhead) / step - 1e-9) * step

    def on_demand_from_start_cost(self, step: float) -> float:
        """What on-demand from the start is billed, the yardstick a spot policy's run is dearer or cheaper than."""
        return self.on_demand_price * self.on_demand_from_start_seconds(step) / 3600

    @property
    def on_demand_cost(self) -> float:
        """What the whole job costs on on-demand with no overhead: the normalizer of every reported cost."""
        return self.on_demand_price * self.compute_seconds / 3600


@dataclass
class RunResult:
    cost: float = 0.0
    finished_at: float | None = None  # seconds after the start
    gave_up: bool = False
    preemptions: int = 0
    switches: int = 0  # consecutive instances in different markets
    moves: int = 0  # consecutive instances in different zones
    launches: int = 0
    spot_seconds: float = 0.0
    on_demand_seconds: float = 0.0
    deadline_seconds: float = 0.0
    attempts: list[PastAttempt] = field(default_factory=list)  # times on the market's clock (`JobRun.origin`)

    @property
    def met_deadline(self) -> bool:
        return self.finished_at is not None and self.finished_at <= self.deadline_seconds + 1e-6


def run_job(
    policy: StepPolicy,
    zones: tuple[str, ...],
    available: np.ndarray,
    step: float,
    job: SimJob,
    *,
    observe: Observe = "tick",
    job_id: int = 1,
    seen_before: np.ndarray | None = None,
) -> RunResult:
    """Simulate `job` from the first column of `available` (zones × steps) until done or the columns run out.

    `seen_before` (zones × steps) is the market's availability in the steps just before the start, as a platform
    that keeps watching its markets has it on record when the job arrives: it goes into the policy's spot log first.
    """
    run = JobRun(policy, zones, np.asarray(available, dtype=bool), step, job, observe, job_id)
    if seen_before is not None:
        run.record_history(np.asarray(seen_before, dtype=bool))
    return run.go()


class JobRun:
    """One job stepping through its availability columns (`run_job` drives it alone, `fleet` with others).

    Times are on the market's clock: step t of the columns is `origin + t * step` (run_job: origin 0, the job's
    start). `log` is what the job knows of spot; jobs of one fleet share theirs.
    """

    def __init__(
        self, policy, zones, available, step, job: SimJob, observe: Observe, job_id: int, *, origin: float = 0.0,
        log: SpotLog | None = None,
    ) -> None:
        if available.ndim != 2 or available.shape[0] != len(zones):
            raise ValueError(f"availability must be (zones, steps) with {len(zones)} zones, got {available.shape}")
        if observe not in OBSERVE_MODES:
            raise ValueError(f"observe must be one of {', '.join(OBSERVE_MODES)}, got {observe!r}")
        self.policy, self.zones, self.step, self.job = policy, zones, step, job
        self.available = job.spot_it_can_have(available, zones)
        self.tick_model = observe == "tick"
        self.drain_first = observe == "drain-first"
        self.job_id = job_id
        self.origin = origin
        self.log = log if log is not None else SpotLog()
        self.result = RunResult(deadline_seconds=job.deadline_seconds)
        self.current: Placement | None = None
        self.zone_index = {z: i for i, z in enumerate(zones)}
        self.progress = 0.0
        self.overhead_left = 0.0
        self.last_market: str | None = None
        self.last_zone: str | None = None
        self.history: tuple[PastAttempt, ...] = ()
        self.not_before: float | None = None  # a Wait's time: not asked again before it while nothing is held
        self.capacity_rounds = 0  # waits since the job last started an instance, as the controller counts them
        self.spot_step_cost = {zone: job.spot_price_in(zone) * step / 3600 for zone in zones}
        self.instance_seconds = self.instance_cost = 0.0  # what the instance held has been billed so far
        self.od_price = job.on_demand_price * step / 3600
        self.prices = job.policy_prices(zones)

    def record_history(self, seen_before: np.ndarray) -> None:
        if seen_before.ndim != 2 or seen_before.shape[0] != len(self.zones):
            raise ValueError(f"history must be (zones, steps) with {len(self.zones)} zones, got {seen_before.shape}")
        seen_before = self.job.spot_it_can_have(seen_before, self.zones)
        steps = seen_before.shape[1]
        for t in range(steps):
            for zone, up in zip(self.zones, seen_before[:, t].tolist()):
                self.log.record(zone, self.time_of(t - steps), up)

    @property
    def steps(self) -> int:
        return self.available.shape[1]

    def time_of(self, t: int) -> float:
        return self.origin + t * self.step

    def go(self) -> RunResult:
        for t in range(self.steps):
            self.check_preemption(t)
            if not self.advance(t):
                break
        return self.finish()

    def check_preemption(self, t: int) -> None:
        """Step t begins: a spot instance whose zone has no spot now is lost."""
        self._maybe_preempt(self.time_of(t), self.available[:, t])

    def note_held_spot(self, t: int) -> None:
        """Record that spot is there now where this job's spot instance still runs (news to the jobs it shares its
        log with, as the controller knows its running instances are alive)."""
        current = self.current
        if current is not None and current.market == "spot":
            self.log.record(current.zone, self.time_of(t), True)

    def advance(self, t: int) -> bool:
        """The rest of step t after the preemption check; False once the job is over (work done, or given up)."""
        now, column = self.time_of(t), self.available[:, t]
        if self.work_done:
            self.result.finished_at = now - self.origin
            return False
        spot_now = self._observe(now, column)
        if self.current is None and self.not_before is not None and now < self.not_before - 1e-6:
            return True  # waiting, as the controller does until the time the policy gave
        if not self._ask(now, column, spot_now):
            return False
        self._run_step(now)
        return True

    @property
    def work_done(self) -> bool:
        return self.progress >= self.job.compute_seconds - 1e-6

    def finish(self) -> RunResult:
        """End the run: the instance still held is given up when the work was done, or when the columns ran out. Work
        done by the end of the last column is done then (a window of the deadline's length whose job used all of it),
        not missed."""
        if self.result.finished_at is None and self.work_done:
            self.result.finished_at = self.steps * self.step
        if self.current is not None:
            finished = self.result.finished_at
            ended = self.origin + (finished if finished is not None else self.steps * self.step)
            self._end(ended, "succeeded" if finished is not None else "cancelled")
        self.result.attempts = list(self.history)
        return self.result

    def _maybe_preempt(self, now: float, column: np.ndarray) -> None:
        current = self.current
        if current is not None and current.market == "spot" and not column[self.zone_index[current.zone]]:
            self.result.preemptions += 1
            self.log.record(current.zone, now, False)
            self._end(now, "preempted")

    def _observe(self, now: float, column: np.ndarray) -> dict[str, bool]:
        if not self.tick_model:
            return {}
        spot_now = {}
        for zone, up in zip(self.zones, column.tolist()):
            spot_now[zone] = up
            self.log.record(zone, now, up)
        return spot_now

    def _ask(self, now: float, column: np.ndarray, spot_now: dict[str, bool]) -> bool:
        """Ask the policy until it settles for this step; False when it gives up."""
        refused: set[str] = set()
        for _ in range(len(self.zones) + 2):
            decision = self.policy.decide(self._context(now, spot_now))
            if isinstance(decision, Keep):
                if self.current is None:
                    raise RuntimeError(f"{self.policy.name}: Keep while the job holds no instance")
                return True
            if isinstance(decision, Wait):
                if self.current is not None:  # the controller moves the job off it, and places it at its next question
                    self._end(now, "released")
                else:  # as the controller counts a wait while placing, and does not place the job before its time
                    self.capacity_rounds += 1
                    self.not_before = decision.until
                return True
            if isinstance(decision, GiveUp):
                self.result.gave_up = True
                return False
            if self._same_as_current(decision):
                return True
            zone = self.zone_index.get(decision.zone)
            if zone is None:
                raise RuntimeError(f"{self.policy.name}: launch in unknown zone {decision.zone!r}")
            if self.drain_first and self.current is not None:
                self._end(now, "moved")
            if decision.market == "spot" and not column[zone]:
                if decision.zone in refused:
                    raise RuntimeError(f"{self.policy.name}: asked twice in one step for spot in {decision.zone}")
                refused.add(decision.zone)
                self.log.record(decision.zone, now, False)
                self.history = (*self.history, PastAttempt(decision.zone, "spot", now, None, now, self.job.spot_refusal_in(decision.zone)))
                continue
            self._start(now, decision)
            return True
        return True  # kept asking for zones without capacity: idle this step

    def _same_as_current(self, launch: Launch) -> bool:
        current = self.current
        return current is not None and current.zone == launch.zone and current.market == launch.market

    def _start(self, now: float, launch: Launch) -> None:
        if self.current is not None:
            self._end(now, "moved")
        result = self.result
        result.launches += 1
        if self.last_market is not None and self.last_market != launch.market:
            result.switches += 1
        if self.last_zone is not None and self.last_zone != launch.zone:
            result.moves += 1
        self.last_market, self.last_zone = launch.market, launch.zone
        self.current = Placement(launch.zone, launch.market, now)
        self.instance_seconds = self.instance_cost = 0.0
        self.capacity_rounds = 0
        self.overhead_left = self.job.restart_overhead
        if launch.market == "spot":
            self.log.record(launch.zone, now, True)

    def _end(self, now: float, reason: str) -> None:
        current = self.current
        assert current is not None
        if current.market == "spot" and reason != "preempted":
            self.log.record(current.zone, now, True)  # it ran until now: spot was there, as the controller knows
        self.history = (*self.history, PastAttempt(current.zone, current.market, current.since, current.since, now, reason))
        self._charge_as_billed(current.market, reclaimed=reason == "preempted")
        self.current = None

    def _charge_as_billed(self, market: str, *, reclaimed: bool) -> None:
        """The instance ends: its steps billed so far become what the job's billing rule charges for them."""
        billing, held = self.job.billing, self.instance_seconds
        if billing is None or held <= 0:
            return
        charged = billing.charged_seconds(held, market=market, reclaimed=reclaimed)
        self.result.cost += (charged - held) * self.instance_cost / held

    def _run_step(self, now: float) -> None:
        current = self.current
        if current is None:
            return
        result = self.result
        step_cost = self.spot_step_cost[current.zone] if current.market == "spot" else self.od_price
        result.cost += step_cost
        self.instance_cost += step_cost
        self.instance_seconds += self.step
        if current.market == "spot":
            result.spot_seconds += self.step
        else:
            result.on_demand_seconds += self.step
        work = max(self.step - self.overhead_left, 0.0)
        self.overhead_left = max(self.overhead_left - self.step, 0.0)
        self.progress = min(self.progress + work, self.job.compute_seconds)

    def _context(self, now: float, spot_now: dict[str, bool]) -> PlacementContext:
        return PlacementContext(
            job_id=self.job_id,
            now=now,
            zones=self.zones,
            use_spot=self.job.settings.use_spot,
            fallback=self.job.settings.fallback,
            submitted_at=self.origin,
            preemptions_before_fallback=self.job.settings.preemptions_before_fallback,
            fallback_window=self.job.settings.fallback_window,
            capacity_rounds=self.capacity_rounds,
            # the wait may end up to the step's rounding before its time (`advance`): this step's tries are the new round's
            waited_until=None if self.not_before is None else min(self.not_before, now),
            history=self.history,
            deadline=self.origin + self.job.deadline_seconds,
            estimated_duration=self.job.compute_seconds,
            current=self.current,
            progress=self.progress,
            restart_overhead=self.job.restart_overhead,
            step=self.step,
            spot=self.log,
            spot_now=spot_now,
            moves_drain_first=self.drain_first,
            save_interval=0.0,  # a preemption costs the job its restart, never work done
            **self.prices,
        )

