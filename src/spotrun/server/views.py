"""Read models of jobs (`spotrun.api_models`) built from the store's rows: the HTTP API's response bodies, and what
the CLI prints in embedded mode.

They are built here, once, so `spotrun status --json` prints the same thing whether it read the store itself or asked
a team server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, not_, select
from sqlalchemy.orm import Session

from spotrun.api_models import UNPLACED_ENDS, AttemptView, BillView, EventView, JobCost, JobDetail, JobRow, NotifyView
from spotrun.control import reclaims, records
from spotrun.control.progress import newest_checkpoint
from spotrun.control.states import is_terminal
from spotrun.costs.ledger import attempt_cost, bill, priced
from spotrun.spec.notify import webhook_origin
from spotrun.state import Attempt, Event, Job

# `api_models.ended_without_instance` of an ended attempt, as SQL
_TRY_WITHOUT_INSTANCE = and_(
    Attempt.started_at.is_(None), Attempt.ended_at.is_not(None), Attempt.end_reason.in_(sorted(UNPLACED_ENDS)),
    Attempt.billed_seconds == 0,
)


def job_row(job: Job, now: float) -> JobRow:
    """From the attempts that got an instance: the others (refused tries, thousands for a job that waited long for
    spot) cost nothing and report nothing."""
    placed = job.placed_attempts
    running = [a for a in placed if a.ended_at is None]  # the oldest: a standby launched to replace it waits
    current = running[0] if running and not is_terminal(job.state) else None
    newest = newest_checkpoint(placed) or (None, None)
    job_bill = bill(placed, now)
    return JobRow(
        id=job.id,
        name=job.name,
        state=job.state,
        attempts=len(placed),
        preemptions=job.preemptions,
        market=current.market if current else None,
        zone=current.zone if current else None,
        elapsed=(job.finished_at or now) - job.created_at,
        cost=job_bill.cost,
        checkpoint_step=newest[0],
        failure_reason=job.failure_reason,
        total_steps=newest[1],
        unpriced_attempts=job_bill.unpriced_attempts,
        owner=job.owner,
    )


def attempt_views(
    attempts: list[Attempt], now: float, pending: Mapping[int, float | None] | None = None
) -> list[AttemptView]:
    """The attempts as the API shows them, their costs as of `now`; `pending`: the release times of those whose
    instance is left for the cloud to take back (`reclaims.awaiting_release`)."""
    by_id = {attempt.id: attempt for attempt in attempts}
    held = {a.id for a in records.held_standbys([a for a in attempts if a.ended_at is None])}
    pending = pending or {}
    return [_attempt_view(attempt, by_id, attempt.id in held, pending.get(attempt.id), now) for attempt in attempts]


def _attempt_view(
    attempt: Attempt, by_id: dict[int, Attempt], held: bool, left_until: float | None, now: float
) -> AttemptView:
    view = AttemptView.model_validate(attempt).model_copy(
        update={"cost": attempt_cost(attempt, now) if priced(attempt) else None, "left_to_cloud_until": left_until})
    predecessor = by_id.get(attempt.standby_for) if attempt.standby_for is not None else None
    if predecessor is None:
        return view
    standing_by = held and attempt.state == "running"  # launched and up, not yet taking over
    state = "standby" if standing_by else view.state
    return view.model_copy(update={"takes_over_from": predecessor.number, "state": state})


def event_views(events: list[Event]) -> list[EventView]:
    return [EventView.model_validate(event) for event in events]


def job_detail(session: Session, job: Job, now: float, *, settled_below: int = 0) -> JobDetail:
    """The job, its attempts and its bill; with `settled_below`, without the tries numbered below it that got no
    instance: they never change once ended, and a job that waited days for spot has thousands, so a reader that
    keeps them asks only for the rest."""
    settled = and_(Attempt.number < settled_below, _TRY_WITHOUT_INSTANCE)
    attempts = list(
        session.scalars(select(Attempt).where(Attempt.job_id == job.id, not_(settled)).order_by(Attempt.number)))
    pending = pending_reclaims(session, job)
    return JobDetail(
        job=job_row(job, now), owner=job.owner, attempts=attempt_views(attempts, now, pending),
        bill=job_bill_view(job, now, pending),
        checkpoint_store=(job.spec.get("checkpoint") or {}).get("store"),
        stuck=None if is_terminal(job.state) else _stuck(session, job.id),
        notify=notify_view(job.spec),
    )


def notify_view(spec: Mapping[str, Any]) -> NotifyView | None:
    notify = spec.get("notify")
    if not notify:
        return None
    return NotifyView(webhook=webhook_origin(notify["webhook"]), events=list(notify["events"]))


def pending_reclaims(session: Session, job: Job) -> dict[int, float | None]:
    """The release times of the job's ended attempts whose instance is left for the cloud to take back."""
    return reclaims.awaiting_release(session, [attempt.id for attempt in job.placed_attempts if attempt.ended_at])


def job_bill_view(job: Job, now: float, pending: Mapping[int, float | None]) -> BillView:
    """The job's bill, and the part of it that is provisional: the attempts whose instance the cloud may yet take
    back for free (`control.reclaims`)."""
    placed = job.placed_attempts
    view = BillView.of(bill(placed, now))
    left = [attempt for attempt in placed if attempt.id in pending]
    if not left:
        return view
    until = [pending[attempt.id] for attempt in left if pending[attempt.id] is not None]
    return view.model_copy(update={
        "provisional": sum(attempt_cost(attempt, now) for attempt in left if priced(attempt)),
        "provisional_until": max(until, default=None),
    })


def job_cost(session: Session, job: Job, now: float) -> JobCost:
    return JobCost(job_id=job.id, name=job.name, state=job.state,
                   bill=job_bill_view(job, now, pending_reclaims(session, job)))


def _stuck(session: Session, job_id: int) -> str | None:
    """The controller's newest word on the job when it is that it cannot drive it (`control.stuck`)."""
    newest = session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id.desc()).limit(1)).first()
    return newest.message if newest is not None and newest.kind == "stuck" else None
