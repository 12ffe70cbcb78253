"""What users ask of the control plane: submit a job, cancel it, preempt it (chaos), read it back."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import fsspec
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, selectinload

from spotrun import config
from spotrun.control.job_errors import JobNotFound, PreemptRefused, check_notice
from spotrun.control.placement import job_prices, market_gpus, price_for
from spotrun.control.states import LIVE, TERMINAL, JobState, is_terminal, state_names
from spotrun.costs.catalog import UnknownPrice
from spotrun.policy import markets_conflict, policy_names
from spotrun.providers import CLOUDS, ProviderError, get_provider
from spotrun.providers.local import market as local_market
from spotrun.providers.local.provider import DEFAULT_QUOTA as LOCAL_QUOTA
from spotrun.spec import JobSpec, Problem, SpecError
from spotrun.spec.durations import MAX_DURATION_SECONDS
from spotrun.state import Attempt, Event, Job, Store, add_event
from spotrun.state.event_order import first_unsettled_id
from spotrun.state.models import MAX_ID
from spotrun.user_paths import UnknownUser, expand_user

LOCAL_OWNER = "local"  # whose the jobs launched without a server are (embedded mode's)

# the zones a job on the local cloud may name (`submit`'s `local_zones`)
LOCAL_ZONES = local_market.ZONES


def submit(
    store: Store,
    spec: JobSpec,
    now: float,
    *,
    spec_dir: Path | None = None,
    owner: str = LOCAL_OWNER,
    source: str = "<job>",
    prices: Callable[..., tuple[float, float]] = price_for,
    local_zones: Sequence[str] = LOCAL_ZONES,
) -> int:
    """Write a validated job into the store as PENDING; paths and defaults are resolved here, once.

    `prices` is the price function the controller bills with (the catalog's by default); a job it cannot price
    is refused. `local_zones`: the zones a job on the local cloud may name, the local cloud's own unless the caller
    places local jobs in a cloud of its own (the controller's tests' in-memory one) and names that cloud's. A
    SpecError lists every problem found, and nothing is stored."""
    problems = resource_problems(spec, prices) + _deadline_problems(spec, now)
    if spec.resources.cloud == "local":
        problems += _problems_on_this_machine(spec, spec_dir or Path.cwd(), local_zones)
    if problems:
        raise SpecError(source, problems)
    with store.session() as session:
        job = Job(name=spec.name or "job", owner=owner, spec={}, state=JobState.PENDING.value, created_at=now,
                  updated_at=now, notified_event_id=0 if spec.notify is not None else None)  # `control.notifier`'s
        session.add(job)
        session.flush()
        job.spec = _resolved(spec, job.id, spec_dir).to_json()
        add_event(session, at=now, kind="state", job_id=job.id, message=f"submitted job {job.name!r}")
        return job.id


def check_resources(spec: JobSpec, source: str, prices: Callable[..., tuple[float, float]] = price_for) -> None:
    """Refuse, before anything is stored, a job the controller could never place or bill."""
    problems = resource_problems(spec, prices)
    if problems:
        raise SpecError(source, problems)


def resource_problems(spec: JobSpec, prices: Callable[..., tuple[float, float]] = price_for) -> list[Problem]:
    """Why the controller could never place or bill the job: its cloud, instance type, checkpoint store, policy
    and prices (none: it can)."""
    resources, problems = spec.resources, []
    if resources.cloud not in CLOUDS:
        problems.append(Problem("resources.cloud", f"unknown cloud {resources.cloud!r}; known: {', '.join(CLOUDS)}"))
    elif resources.instance_type is None:
        problems.append(Problem("resources.instance_type", f"cloud {resources.cloud!r} needs an instance type; "
                                "choosing one from accelerators alone is not supported yet"))
    problems += _checkpoint_store_problems(spec)
    if spec.spot.policy not in policy_names():
        known = ", ".join(policy_names())
        problems.append(Problem("spot.policy", f"unknown policy {spec.spot.policy!r}; known: {known}"))
    elif (conflict := markets_conflict(spec.spot.policy, spec.spot.use_spot, spec.spot.fallback)) is not None:
        problems.append(Problem("spot.policy", f"{conflict}: change one of them (the default policy keeps both)"))
    if resources.cloud in CLOUDS and resources.instance_type is not None:
        try:
            job_prices(spec, "on-demand", "", prices)
        except UnknownPrice as unknown:
            problems.append(Problem("resources.instance_type", f"{unknown}; or give resources.prices (on_demand, spot)"))
    return problems + _accelerator_problems(spec)


def _accelerator_problems(spec: JobSpec) -> list[Problem]:
    """GPUs a cloud attaches by name (GCE's accelerator types) must be names it knows, prices given or not: the
    zones, the launch and the market are asked by that name (`market_gpus`)."""
    try:
        market_gpus(spec)
    except ValueError as unknown:
        return [Problem("resources.accelerators", str(unknown))]
    return []


def _problems_on_this_machine(spec: JobSpec, base_dir: Path, local_zones: Sequence[str]) -> list[Problem]:
    """What the local cloud can tell at once: more nodes than its quota of instances could never run together
    (a gang of 100,000 had the controller write as many rows in one transaction, the store locked meanwhile), and a
    workdir that is not a folder would fail every attempt."""
    problems = []
    if spec.resources.nodes > LOCAL_QUOTA:
        problems.append(Problem("resources.nodes", f"{spec.resources.nodes} nodes: the local cloud runs at most "
                                                   f"{LOCAL_QUOTA} instances at once"))
    for index, zone in enumerate(spec.spot.zones or ()):
        if zone not in local_zones:  # else stored, and failed at once: no zone offers it
            problems.append(Problem(f"spot.zones[{index}]", f"unknown zone {zone!r}; the local cloud's zones are "
                                                            f"{', '.join(local_zones)}"))
    try:
        workdir = spec.resolved_workdir(base_dir)
    except UnknownUser as unknown:
        problems.append(Problem("workdir", str(unknown)))
    else:
        if workdir is not None and not os.path.isdir(workdir):
            problems.append(Problem("workdir", f"{workdir} is not a folder on this machine"))
    try:
        spec.resolved_checkpoint_store(base_dir)
    except UnknownUser as unknown:
        problems.append(Problem("checkpoint.store", str(unknown)))
    return problems


def _deadline_problems(spec: JobSpec, now: float) -> list[Problem]:
    """A deadline no placement could keep: one already past, or one sooner than the job's estimated compute
    (plus its restart overhead, when the spec gives one) would take on on-demand from now."""
    deadline = spec.deadline_at(now)
    if deadline is None:
        return []
    left = deadline - now
    if left <= 0:
        before = f"; it is {_hours(-left)} before it" if left < 0 else ""
        return [Problem("spot.deadline", f"must be after the launch{before}")]
    if left > MAX_DURATION_SECONDS:  # as a duration would be: a deadline planner's grid over centuries took minutes
        return [Problem("spot.deadline", f"must be at most 3650d (10 years) after the launch; it is {_hours(left)}")]
    if spec.estimated_duration is None:
        return []
    needed = spec.estimated_duration + (spec.spot.restart_overhead or 0.0)
    if left < needed:
        what = "estimated_duration" + (" plus spot.restart_overhead" if spec.spot.restart_overhead else "")
        return [Problem(
            "spot.deadline",
            f"leaves {_hours(left)} from submission, less than the {what} ({_hours(needed)}): even on-demand from "
            "the start would miss it",
        )]
    return []


def _hours(seconds: float) -> str:
    return f"{seconds / 86400:,.1f} days" if seconds >= 2 * 86400 else f"{seconds / 3600:.3g} h"


def _checkpoint_store_problems(spec: JobSpec) -> list[Problem]:
    """Checkpoints must outlive the instance: on a cloud, a relative path is on the instance's own disk, and every
    rank of a multi-node job reads and writes the same checkpoints, which a path on one instance's disk cannot be."""
    store = spec.checkpoint.store
    if store is not None and "://" in store:
        return _unknown_protocol(store)
    if spec.resources.cloud == "local":
        return []
    if spec.resources.nodes > 1:
        return [Problem("checkpoint.store", "a multi-node job on a cloud needs storage every node sees "
                        f"(s3://, gs://, ...), got {store!r}")]
    try:
        absolute = store is None or expand_user(store).is_absolute()
    except UnknownUser as unknown:
        return [Problem("checkpoint.store", str(unknown))]
    if not absolute:
        return [Problem("checkpoint.store", f"{store!r} is a relative path, on the instance's own disk, which goes "
                        "with it at a preemption: give storage that outlives it (s3://, gs://, ...) or a mounted "
                        "folder's absolute path")]
    return []


def _unknown_protocol(store: str) -> list[Problem]:
    """A store URL whose protocol no fsspec filesystem here knows fails every attempt at its restore, after its
    instance was paid for. A known one whose package is missing here may be on the instance: not refused."""
    protocol = store.split("://", 1)[0].split("::")[-1]
    if protocol in fsspec.available_protocols():
        return []
    return [Problem("checkpoint.store", f"{store!r}: no filesystem knows the protocol {protocol!r} (e.g. s3://, gs://, "
                    "az://, or a folder's absolute path)")]


def _resolved(spec: JobSpec, job_id: int, spec_dir: Path | None) -> JobSpec:
    """The spec as stored: the default checkpoint store filled in, and on the local cloud the workdir and a local
    checkpoint store made absolute from the job file's folder (the instance runs elsewhere: in its own folder)."""
    local, base_dir = spec.resources.cloud == "local", spec_dir or Path.cwd()
    store = spec.resolved_checkpoint_store(base_dir) if local else spec.checkpoint.store
    checkpoint = spec.checkpoint.model_copy(
        update={"store": store or config.default_checkpoint_store(job_id, spec.name or "job")}
    )
    workdir = spec.resolved_workdir(base_dir) if local else spec.workdir
    return spec.model_copy(update={"checkpoint": checkpoint, "workdir": workdir})


def request_cancel(store: Store, job_id: int, now: float) -> bool:
    """Ask the controller to cancel; False when the job had already ended. The mark is a compare-and-set on the
    job's state: a job the controller ends between this read and this write is not marked (nor told "cancelling").
    A cancel asked again while the first is carried out is True, and recorded once."""
    with store.session() as session:
        get_job(session, job_id)  # one that does not exist is refused as such
        live = (Job.id == job_id, Job.state.in_(state_names(LIVE)))
        marked = session.execute(
            update(Job).where(*live, Job.cancel_requested.is_not(True)).values(cancel_requested=True),
            execution_options={"synchronize_session": False},
        ).rowcount
        if marked:
            add_event(session, at=now, kind="cancel_requested", job_id=job_id, message="cancel requested")
            return True
        return session.scalar(select(func.count()).select_from(Job).where(*live)) > 0


@dataclass(frozen=True)
class PreemptTarget:
    instance_id: str
    provider: str
    attempt_number: int


def preempt(
    store: Store, job_id: int, now: float, notice_seconds: float | None = None, node: int | None = None
) -> PreemptTarget:
    """Chaos: have the cloud reclaim the instance the job runs on (node `node` of a multi-node job, default 0),
    with the notice window. A request refused before the cloud is asked stores nothing; one the cloud refuses is
    recorded with its answer."""
    check_notice(notice_seconds)
    with store.session() as session:
        job = get_job(session, job_id)
        if node is not None and node >= (nodes := JobSpec.stored(job.spec).resources.nodes):
            numbered = "only node 0" if nodes == 1 else f"they are numbered 0 to {nodes - 1}"
            raise PreemptRefused(f"job {job_id} has {nodes} node{'s' if nodes > 1 else ''}: there is no node {node} "
                                 f"({numbered})")
        attempt = _open_attempt_of_node(session, job_id, node or 0)
        if attempt is None or attempt.instance_id is None or attempt.state not in ("running", "draining"):
            holds = f"no running instance as node {node}" if node is not None else "no running instance"
            raise PreemptRefused(f"job {job_id} is {job.state} and holds {holds} to preempt")
        if attempt.market != "spot":
            raise PreemptRefused(
                f"job {job_id} runs on {attempt.instance_id}, an {attempt.market} instance: only spot instances are "
                "taken back"
            )
        target = PreemptTarget(attempt.instance_id, attempt.provider, attempt.number)
        add_event(
            session, at=now, kind="chaos", job_id=job_id, attempt_id=attempt.id,
            message=f"preemption of {attempt.instance_id} requested by the user",
        )
        attempt_id = attempt.id
    try:
        get_provider(target.provider).preempt(target.instance_id, notice_seconds)
    except (ProviderError, NotImplementedError, ValueError, LookupError) as refused:
        why = str(refused) or type(refused).__name__
        with store.session() as session:
            add_event(session, at=now, kind="chaos", job_id=job_id, attempt_id=attempt_id,
                      message=f"preemption of {target.instance_id} not done: {why}")
        raise PreemptRefused(why) from refused
    return target


def _open_attempt_of_node(session: Session, job_id: int, node: int) -> Attempt | None:
    """The node's running attempt (the oldest open one: a standby launched to replace it comes after it)."""
    return session.scalars(
        select(Attempt)
        .where(Attempt.job_id == job_id, Attempt.ended_at.is_(None), Attempt.node_rank == node)
        .order_by(Attempt.number)
    ).first()


def get_job(session: Session, job_id: int) -> Job:
    if not 1 <= job_id <= MAX_ID:  # PostgreSQL refuses to compare its 32-bit ids with a larger number
        raise JobNotFound(job_id)
    job = session.get(Job, job_id)
    if job is None:
        raise JobNotFound(job_id)
    return job


def list_jobs(
    session: Session, *, owner: str | None = None, ended: bool | None = None, before: int | None = None,
    limit: int | None = None,
) -> list[Job]:
    """Jobs oldest first: an owner's (None: everyone's), ended or not (None: both), numbered below `before`, and of
    those the newest `limit` (None: all). A store keeps every job, so lists that are read often ask for a few."""
    query = select(Job)
    if owner is not None:
        query = query.where(Job.owner == owner)
    if ended is not None:
        query = query.where(Job.state.in_(state_names(TERMINAL if ended else LIVE)))
    if before is not None:
        query = query.where(Job.id < before)
    # what a job's row reads, in one extra query, not one per job: listing 1,000 jobs was dominated by those round trips
    query = query.options(selectinload(Job.placed_attempts))
    if limit is None:
        return list(session.scalars(query.order_by(Job.id)))
    return list(reversed(session.scalars(query.order_by(Job.id.desc()).limit(limit)).all()))


def job_events(session: Session, job_id: int, after_id: int = 0) -> list[Event]:
    """The job's events past `after_id`, in id order; while the job is live, only up to an id a transaction may
    still commit (`first_unsettled_id`), so that a follower moving its cursor to the last one returned misses none."""
    if after_id >= MAX_ID:  # no event has a larger id (PostgreSQL refuses to compare its 32-bit ids with one)
        return []
    query = select(Event).where(Event.job_id == job_id, Event.id > after_id)
    job = session.get(Job, job_id)
    # an ended job's events are all committed: a follower that stops at its end is given every one
    unsettled = None if job is None or is_terminal(job.state) else first_unsettled_id(session, after_id)
    if unsettled is not None:
        query = query.where(Event.id < unsettled)
    return list(session.scalars(query.order_by(Event.id)))


def job_attempts(session: Session, job_id: int) -> list[Attempt]:
    return list(session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)))
