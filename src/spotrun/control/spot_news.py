"""Spot seen in a market wakes the jobs waiting there for it.

A job whose policy waits for spot (no capacity anywhere, `fallback: wait`, or a deadline-aware policy idling) asks
again only when its wait is over, up to `backoff_max` later. When another job of its market gets a spot instance,
that is news it would otherwise learn only then: its wait is ended now, and its next placement reads the start in
the market's history. Waits after a quota or launch error are backoffs, not waits for spot: they are left alone.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.control.placement import job_prices, price_for
from spotrun.control.states import LIVE, state_names
from spotrun.policy.zones import max_spot_price
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job, add_event


def wake_jobs_waiting_for_spot(
    session: Session, started: Attempt, now: float, prices: Callable[..., tuple[float, float]] = price_for
) -> list[int]:
    """End the waits of the other jobs waiting for spot that `started` (a spot attempt that just got its instance)
    could have been: same cloud and instance type, its zone among theirs, its price within their cap. Their ids."""
    waiting = session.scalars(
        select(Job).where(
            Job.state.in_(state_names(LIVE)), Job.waits_for_spot.is_(True), Job.not_before > now,
            Job.id != started.job_id,
        )
    ).all()
    woken = []
    for job in waiting:
        if could_have_been_theirs(JobSpec.model_validate(job.spec), started, prices):
            job.not_before = now
            add_event(
                session, at=now, kind="woken", job_id=job.id,
                message=f"spot started in {started.zone} for job {started.job_id}: trying again now",
                data={"zone": started.zone, "job": started.job_id},
            )
            woken.append(job.id)
    return woken


def could_have_been_theirs(spec: JobSpec, started: Attempt, prices: Callable[..., tuple[float, float]]) -> bool:
    resources, spot = spec.resources, spec.spot
    if not spot.use_spot or (resources.cloud, resources.instance_type) != (started.provider, started.instance_type):
        return False
    if spot.zones is not None and started.zone not in spot.zones:
        return False
    _, on_demand = job_prices(spec, "spot", started.zone, prices)
    return started.price_per_hour <= max_spot_price(on_demand, spot.max_price)
