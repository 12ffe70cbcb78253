"""What the controller hands the placement policy, and the prices it records with each attempt."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import case, exists, false, or_, select, true
from sqlalchemy.orm import Session

from spotrun.control.progress import compute_and_progress, restart_overhead, save_interval
from spotrun.control.reclaims import CLOUD_NOTICE_SOURCES
from spotrun.costs.catalog import UnknownPrice
from spotrun.costs.market_prices import catalog_prices as price_for
from spotrun.gcp_accelerators import accelerators_text
from spotrun.policy import PastAttempt, PlacementContext, max_spot_price
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Instance, Job


# How much work a trainer that reports no checkpoints is taken to lose when its instance goes without a word: the
# SDK's default interval between saves (`spotrun.sdk.schedule.DEFAULT_EVERY_SECONDS`), as nothing tells when it
# saved last. Taken as kept, those minutes made such jobs miss their deadlines (docs/benchmarks.md).
UNREPORTED_SAVE_INTERVAL = 300.0

# Until when an ended try's work is taken as kept: to its end where its agent reported the end (a finish, a stop or a
# save at a preemption notice); else to its last heartbeat (the instance may have died any time after it, and the
# controller notices only later: the next poll, a heartbeat timeout), less a save interval. What the trainer reports
# of its checkpoints, when it does, is read instead (`progress.py`).
_WORKED_UNTIL = case(
    (Attempt.ended_at.is_(None), None),
    (Attempt.reported_outcome.is_not(None), Attempt.ended_at),
    (Attempt.last_heartbeat_at < Attempt.ended_at, Attempt.last_heartbeat_at - UNREPORTED_SAVE_INTERVAL),
    else_=Attempt.ended_at - UNREPORTED_SAVE_INTERVAL,
)

# Whether the cloud took the try's instance back: preempted, or reclaimed as it stopped to move (it ends "migrated":
# the job had chosen to leave), which the cloud's notice, or the instance seen reclaimed, tells.
_RECLAIMED = case(
    (Attempt.end_reason == "preempted", true()),
    (Attempt.end_reason == "migrated", or_(
        Attempt.notice_source.in_(CLOUD_NOTICE_SOURCES),
        exists().where(Instance.id == Attempt.instance_id, Instance.reclaimed.is_(True)),
    )),
    else_=false(),
)

# what a policy reads of a try, in PastAttempt's order
_PAST_COLUMNS = (
    Attempt.zone, Attempt.market, Attempt.created_at, Attempt.started_at, Attempt.ended_at, Attempt.end_reason,
    _WORKED_UNTIL, _RECLAIMED,
)


def placement_context(
    session: Session, job: Job, spec: JobSpec, provider_zones: list[str], now: float, *,
    market: tuple[PastAttempt, ...] = (), **running: Any,
) -> PlacementContext:
    """What the policy sees; `market` adds other jobs' tries in the same market (`market_attempts`), `running` the
    running-job view (current placement, step, prices)."""
    if spec.spot.deadline is not None:  # only deadline plans weigh what a restart costs
        overhead = spec.spot.restart_overhead
        running.setdefault(
            "restart_overhead", overhead if overhead is not None else restart_overhead(job.placed_attempts)
        )
        running.setdefault("save_interval", save_interval(job.placed_attempts))
    compute, progress = compute_and_progress(job, spec, running.get("restart_overhead"))
    running.setdefault("progress", progress)
    allowed = [z for z in provider_zones if spec.spot.zones is None or z in spec.spot.zones]
    if spec.spot.zones:  # keep the user's order where they gave one
        allowed = [z for z in spec.spot.zones if z in provider_zones]
    return PlacementContext(
        job_id=job.id,
        now=now,
        zones=tuple(allowed),
        use_spot=spec.spot.use_spot,
        fallback=spec.spot.fallback,
        submitted_at=job.created_at,
        preemptions_before_fallback=spec.spot.preemptions_before_fallback,
        fallback_window=spec.spot.fallback_window,
        capacity_rounds=job.capacity_rounds,
        waited_until=job.not_before,
        history=job_tries(session, job.id),
        market=market,
        deadline=spec.deadline_at(job.created_at),
        estimated_duration=compute,
        nodes=spec.resources.nodes,
        **running,
    )


def job_tries(session: Session, job_id: int) -> tuple[PastAttempt, ...]:
    """The job's own tries, in order: only the columns a policy reads, as a job that waited long for spot has
    thousands of refused tries and loading them whole was most of a placement's time."""
    query = select(*_PAST_COLUMNS).where(Attempt.job_id == job_id).order_by(Attempt.number)
    return tuple(map(PastAttempt._make, session.execute(query)))


def market_attempts(
    session: Session, job: Job, spec: JobSpec, now: float, window: float, limit: int | None = None,
) -> tuple[PastAttempt, ...]:
    """Other jobs' spot tries of the job's instance type (with its GPUs, where attached apart: `market_gpus`) with
    the same provider in the last `window` seconds (and,
    with `limit`, only that many, the newest), oldest first: how long spot lasted and how often it was refused
    there, which a policy would otherwise have to learn again for every job. Only the columns a policy reads are
    loaded (there may be thousands of rows); a job that does not use spot reads nothing."""
    if window <= 0 or not spec.spot.use_spot:
        return ()
    resources, gpus = spec.resources, market_gpus(spec)
    query = (
        select(*_PAST_COLUMNS)
        .where(
            Attempt.provider == resources.cloud,
            Attempt.instance_type == resources.instance_type,
            Attempt.gpus == gpus if gpus is not None else Attempt.gpus.is_(None),
            Attempt.created_at >= now - window,
            Attempt.market == "spot",
            Attempt.job_id != job.id,
        )
        .order_by(Attempt.created_at.desc())  # the index's order: the newest `limit` are read, however many match
        .limit(limit)
    )
    return tuple(map(PastAttempt._make, reversed(session.execute(query).all())))


def market_gpus(spec: JobSpec) -> str | None:
    """The GPUs that make the job's market with its machine type where the cloud attaches them apart (GCE: a V100
    stockout in a zone says nothing of the machine without one), as attempts record them; None elsewhere, where the
    type carries its GPUs."""
    accelerators = spec.resources.accelerators
    if spec.resources.cloud != "gcp" or not accelerators:
        return None
    return accelerators_text(accelerators)


def policy_prices(
    spec: JobSpec, prices: Callable[..., tuple[float, float]] = price_for, zones: Iterable[str] = (),
) -> dict[str, Any]:
    """The job's prices for its policy to weigh, as `placement_context`'s fields: spot's and on-demand's $/h (spot
    at the catalog's reference price, the zone not chosen yet), spot's in each of `zones` where known, and the most
    the job pays for spot (`max_spot_price`: the job's cap, else on-demand's price). None of the prices where the
    job's are not known (the cap where the job gives one)."""
    try:
        spot, on_demand = job_prices(spec, "spot", None, prices)
    except UnknownPrice:
        return {} if spec.spot.max_price is None else {"max_spot_price": max_spot_price(0.0, spec.spot.max_price)}
    return {
        "spot_price": spot, "on_demand_price": on_demand, "spot_prices": zone_spot_prices(spec, zones, prices),
        "max_spot_price": max_spot_price(on_demand, spec.spot.max_price),
    }


def zone_spot_prices(
    spec: JobSpec, zones: Iterable[str], prices: Callable[..., tuple[float, float]] = price_for,
) -> dict[str, float]:
    """Spot's $/h for the job in each of `zones` whose price is known (the job's own prices are one for all)."""
    known: dict[str, float] = {}
    for zone in zones:
        try:
            known[zone] = job_prices(spec, "spot", zone, prices)[0]
        except UnknownPrice:
            continue
    return known


def job_prices(
    spec: JobSpec, market: str, zone: str | None, prices: Callable[..., tuple[float, float]] = price_for
) -> tuple[float, float]:
    """The job's own `resources.prices` when given, else what `prices` (the catalog) says."""
    given = spec.resources.prices
    if given is not None:
        return (given.spot if market == "spot" else given.on_demand), given.on_demand
    resources = spec.resources
    return prices(resources.cloud, resources.instance_type, market, zone, resources.accelerators)
