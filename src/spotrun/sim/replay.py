"""Replay one job through a spot market with the live placement policy, in simulated seconds.

The job needs `compute_seconds` of work; each start on a new instance costs `restart_overhead` seconds before
work counts; a spot instance whose zone loses capacity gets `notice_seconds` of notice (the trainer checkpoints
at once, so no work is lost) and is gone after it. Placement decisions come from the very policy object the
controller uses, told the zones' spot prices as the controller tells them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spotrun.policy import Launch, PastAttempt, PlacementContext, PlacementPolicy, Wait

SpotAvailable = Callable[[str, float], bool]  # (zone, seconds since the replay began) -> capacity?


@dataclass(frozen=True)
class ReplayJob:
    job_id: int
    zones: tuple[str, ...]
    compute_seconds: float
    restart_overhead: float
    notice_seconds: float
    preemptions_before_fallback: int = 3
    fallback_window: float = 3600.0
    fallback: str = "on-demand"
    spot_prices: Mapping[str, float] = field(default_factory=dict)  # $/h per zone, as the controller tells its policy
    max_spot_price: float | None = None  # the job's cap, as the controller tells it
    # A launch refused takes this long, as a cloud's launch call does: the tries of one round are told apart in time,
    # and the zone refused longest ago is tried first after a wait, as live
    refused_try_seconds: float = 0.5


@dataclass
class ReplayResult:
    finished_at: float | None
    attempts: list[PastAttempt] = field(default_factory=list)

    @property
    def preemptions(self) -> int:
        return sum(1 for a in self.attempts if a.end_reason == "preempted")

    @property
    def markets(self) -> list[str]:
        return [a.market for a in self.attempts if a.started_at is not None]


def replay(
    job: ReplayJob, policy: PlacementPolicy, spot_available: SpotAvailable, *, horizon: float, step: float = 0.5
) -> ReplayResult:
    """Run the job until it finishes or `horizon` simulated seconds pass."""
    result = ReplayResult(finished_at=None)
    now, done, capacity_rounds, waited_until = 0.0, 0.0, 0, None
    while now < horizon:
        decision = policy.place(_context(job, result, now, capacity_rounds, waited_until))
        if isinstance(decision, Wait):
            capacity_rounds += 1
            now = waited_until = decision.until
            continue
        if not isinstance(decision, Launch):
            return result
        if decision.market == "spot" and not spot_available(decision.zone, now):
            result.attempts.append(PastAttempt(decision.zone, "spot", now, None, now, "no_capacity"))
            now += job.refused_try_seconds
            continue
        capacity_rounds = 0
        started = now
        now, done, reason = _run(job, decision, spot_available, now, done, horizon, step)
        result.attempts.append(PastAttempt(decision.zone, decision.market, started, started, now, reason))
        if reason == "succeeded":
            result.finished_at = now
            return result
    return result


def _run(
    job: ReplayJob, launch: Launch, spot_available: SpotAvailable, start: float, done: float, horizon: float, step: float
) -> tuple[float, float, str]:
    """Simulate one attempt; returns (end time, work done, end reason)."""
    now, warm_at = start, start + job.restart_overhead
    while now < horizon:
        if launch.market == "spot" and not spot_available(launch.zone, now):
            return now + job.notice_seconds, done, "preempted"
        if now >= warm_at:
            done += step
            if done >= job.compute_seconds:
                return now + step, done, "succeeded"
        now += step
    return now, done, "horizon"


def _context(
    job: ReplayJob, result: ReplayResult, now: float, capacity_rounds: int, waited_until: float | None
) -> PlacementContext:
    return PlacementContext(
        job_id=job.job_id,
        now=now,
        zones=job.zones,
        use_spot=True,
        fallback=job.fallback,  # type: ignore[arg-type]
        submitted_at=0.0,
        preemptions_before_fallback=job.preemptions_before_fallback,
        fallback_window=job.fallback_window,
        capacity_rounds=capacity_rounds,
        waited_until=waited_until,
        history=tuple(result.attempts),
        spot_prices=job.spot_prices,
        max_spot_price=job.max_spot_price,
    )
