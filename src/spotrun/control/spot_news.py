"""Spot seen in a market wakes the jobs waiting there for it.

A job whose policy waits for spot (no capacity anywhere, `fallback: wait`, or a deadline-aware policy idling) asks
again only when its wait is over, up to `backoff_max` later. Two things another job of its market learns are news it
would otherwise hear only then: an attempt got a spot instance (spot is there), and a spot instance that was not
taken back ended (it ran to its end, failed, was cancelled or moved: its capacity is free again). Either ends the
waits of jobs that instance could have been, and their next placement reads it in the market's history. Waits
after a quota or launch error are backoffs, not waits for spot: they are left alone.

Not every waiting job is woken at once: thirty jobs sent to one freed instance's capacity would be twenty-nine refused
launch calls in one tick, against a cloud's rate limits. A freed instance wakes the job submitted earliest, a start
the two submitted earliest; each of them that gets spot wakes the next ones in turn, so a zone with room for many fills in
a few ticks (1, 2, 4, 8 ... jobs), and one with room for one costs at most two refused tries.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.control.gang_records import open_attempts_by_rank, split_standbys
from spotrun.control.placement import job_prices, price_for
from spotrun.control.states import LIVE, state_names
from spotrun.policy.zones import max_spot_price
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job, add_event

# How a spot instance may end without freeing its capacity for others: taken back (with or without a notice seen).
_NOT_FREED = frozenset({"preempted", "lost"})
WOKEN_BY_A_START = 2
WOKEN_BY_A_FREED_INSTANCE = 1


def spot_started(session: Session, attempt: Attempt, now: float, prices: Callable[..., tuple[float, float]]) -> list[int]:
    """`attempt` just got its instance: if spot, wake the jobs waiting for it (their ids)."""
    if attempt.market != "spot":
        return []
    news = f"spot started in {attempt.zone} for job {attempt.job_id}"
    return wake_jobs_waiting_for_spot(session, attempt, now, news, WOKEN_BY_A_START, prices)


def spot_ended(
    session: Session, attempt: Attempt, reclaimed: bool, now: float, prices: Callable[..., tuple[float, float]]
) -> list[int]:
    """`attempt`'s instance was just terminated: if it was spot and not taken back, wake the jobs waiting for it."""
    if attempt.market != "spot" or attempt.started_at is None or reclaimed or attempt.end_reason in _NOT_FREED:
        return []
    news = f"job {attempt.job_id}'s spot instance in {attempt.zone} ended ({attempt.end_reason}): its capacity is free"
    return wake_jobs_waiting_for_spot(session, attempt, now, news, WOKEN_BY_A_FREED_INSTANCE, prices)


def wake_jobs_waiting_for_spot(
    session: Session, seen: Attempt, now: float, news: str, limit: int,
    prices: Callable[..., tuple[float, float]] = price_for,
) -> list[int]:
    """End the waits of up to `limit` other jobs waiting for spot that `seen`'s instance could have been (same cloud
    and instance type, its zone among theirs, its price within their cap), the earliest submitted first. Each gets a
    `woken` event saying `news`. Their ids.

    The jobs are judged before anything is written: `prices` may ask the cloud, and a write takes a lock (SQLite's
    on the whole database) that would be held across that call."""
    waiting = session.scalars(
        select(Job)
        .where(
            Job.state.in_(state_names(LIVE)), Job.waits_for_spot.is_(True), Job.not_before > now,
            Job.id != seen.job_id,
        )
        .order_by(Job.created_at, Job.id)
    ).all()
    chosen: list[Job] = []
    for job in waiting:
        if len(chosen) == limit:
            break
        spec = JobSpec.stored(job.spec)
        if could_have_been_theirs(spec, seen, prices) and in_their_gangs_zone(session, job.id, spec, seen.zone):
            chosen.append(job)
    for job in chosen:
        job.not_before = now
        add_event(
            session, at=now, kind="woken", job_id=job.id, message=f"{news}: trying again now",
            data={"zone": seen.zone, "job": seen.job_id},
        )
    return [job.id for job in chosen]


def in_their_gangs_zone(session: Session, job_id: int, spec: JobSpec, zone: str) -> bool:
    """A gang that lost some nodes replaces them in its survivors' zone only (`GangDriver._place_missing`): news of
    another zone is not for it."""
    if spec.resources.nodes == 1:
        return True
    survivors, _ = split_standbys(open_attempts_by_rank(session, job_id))
    return not survivors or survivors[0].zone == zone


def could_have_been_theirs(spec: JobSpec, seen: Attempt, prices: Callable[..., tuple[float, float]]) -> bool:
    resources, spot = spec.resources, spec.spot
    if not spot.use_spot or (resources.cloud, resources.instance_type) != (seen.provider, seen.instance_type):
        return False
    if spot.zones is not None and seen.zone not in spot.zones:
        return False
    _, on_demand = job_prices(spec, "spot", seen.zone, prices)
    return seen.price_per_hour <= max_spot_price(on_demand, spot.max_price)
