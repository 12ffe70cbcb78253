"""Read models of jobs, shared by the HTTP API (its response bodies) and the CLI (what it prints).

They are built from the store's rows here, once, so `spotrun status --json` prints the same thing whether it read
the store itself or asked a team server.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field
from sqlalchemy import and_, not_, select
from sqlalchemy.orm import Session

from spotrun.control import reclaims, records
from spotrun.control.progress import newest_checkpoint
from spotrun.control.states import is_terminal
from spotrun.costs.ledger import MAX_PRICE_PER_HOUR, JobBill, attempt_cost, bill, priced
from spotrun.spec.notify import webhook_origin
from spotrun.state import Attempt, Event, Job


# an attempt's stored prices that no instance has (`ledger.priced`)
OVER_THE_CAP = (f"stored at over {MAX_PRICE_PER_HOUR:,.0f} $/h, a price no instance has (a job stored before prices "
                "were capped)")
UNPRICED = f"attempts left out of `cost`: {OVER_THE_CAP}, whose dollars would be infinite"


class JobRow(BaseModel):
    """One line of `spotrun status`."""

    id: int
    name: str
    state: str
    attempts: int
    preemptions: int
    market: str | None
    zone: str | None
    elapsed: float
    cost: float
    checkpoint_step: int | None
    failure_reason: str | None
    total_steps: int | None = None  # of the whole run, when the SDK was told (progress: checkpoint_step / total)
    unpriced_attempts: int = Field(default=0, description=UNPRICED)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()


# how an attempt that never got an instance ends: refused, launching failed, or a gang's node given back
UNPLACED_ENDS = frozenset({"no_capacity", "price_too_low", "quota_exceeded", "launch_invalid", "launch_error", "released"})


def ended_without_instance(placed: bool, end_reason: str | None, billed_seconds: float | None) -> bool:
    """A try that ended without an instance (refused, launching failed, or a gang's node given back) and cost
    nothing: what `no_instance` says of an attempt and of its end's event."""
    return not placed and end_reason in UNPLACED_ENDS and not billed_seconds


# `ended_without_instance` of an ended attempt, as SQL
_TRY_WITHOUT_INSTANCE = and_(
    Attempt.started_at.is_(None), Attempt.ended_at.is_not(None), Attempt.end_reason.in_(sorted(UNPLACED_ENDS)),
    Attempt.billed_seconds == 0,
)


class AttemptView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    state: str
    provider: str
    market: str
    zone: str
    instance_type: str
    instance_id: str | None
    created_at: float
    started_at: float | None
    agent_started_at: float | None
    notice_at: float | None
    reclaim_at: float | None = Field(
        default=None, description="when the cloud's preemption notice said it would take the instance; null: the "
        "notice named no time, or there was none")
    warned_at: float | None = Field(default=None, description="when the agent reported the first early warning")
    warning: str | None = Field(
        default=None, description='that warning, "<source>/<kind>": e.g. "aws-imds/rebalance" (EC2 recommends '
        "moving off this spot instance: it is at higher risk of interruption)")
    ended_at: float | None
    end_reason: str | None
    billed_seconds: float
    charged_seconds: float | None = Field(
        default=None, description="what the cloud charges for the seconds held (its minimum; AWS charges nothing "
        "for a spot instance it reclaims in its first hour); null: as billed, or not ended yet")
    price_per_hour: float
    on_demand_price_per_hour: float
    cost: float | None = Field(
        default=0.0, description="dollars, as the ledger bills the attempt at the time of the response: the seconds "
        "charged once it ended (held so far while it runs), each at the price of its time (a spot price that moved "
        "while it ran is followed); null: " + OVER_THE_CAP + ", left out of the job's bill")
    left_to_cloud_until: float | None = Field(
        default=None, description="the instance, interrupted, is left for the cloud to take back, which makes it "
        "free (AWS, in its first hour); spotrun terminates it at this time if the cloud has not, and it is then "
        "charged to this time. Until one or the other, `cost` is provisional. null: nothing pending")
    checkpoint_step: int | None
    log_bytes: int
    log_pruned_at: float | None = Field(
        default=None, description="when `spotrun prune-logs` removed the attempt's log (its size stays in "
        "log_bytes); null: the log is whole")
    total_steps: int | None = None
    node_rank: int = 0
    address: str | None = None
    takes_over_from: int | None = Field(default=None, description="a make-before-break move: the attempt number it replaces")

    @computed_field(description="a try that ended without an instance (refused, launching failed, or a gang's node "
                    "given back) and cost nothing: runs of them are shown as one row")  # type: ignore[prop-decorator]
    @property
    def no_instance(self) -> bool:
        return self.ended_at is not None and ended_without_instance(
            self.started_at is not None, self.end_reason, self.billed_seconds)


class EventView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: float
    kind: str
    message: str
    attempt_id: int | None
    data: dict[str, Any] | None = Field(
        default=None, description='what the message says, as fields: e.g. a state move\'s "from" and "to", an ended '
        'attempt\'s "reason", "market", "zone" and whether it was "placed" (got an instance)')

    @computed_field(description="the end of a try that got no instance and cost nothing (an attempt_ended event whose "
                    "attempt is `no_instance`; its data says whether it was `placed`): a run of them is folded for "
                    "reading")  # type: ignore[prop-decorator]
    @property
    def no_instance(self) -> bool:
        data = self.data or {}
        return self.kind == "attempt_ended" and ended_without_instance(
            data.get("placed", False), data.get("reason"), data.get("billed_seconds"))


class BillView(BaseModel):
    spot_seconds: float
    on_demand_seconds: float
    cost: float
    on_demand_cost: float
    seconds: float
    saved: float = Field(description="`on_demand_cost` less `cost`: what spot's prices spared against the same "
                         "instance-seconds on-demand. A job that ended without a result (FAILED, CANCELLED) saved "
                         "nothing: its whole `cost` bought no result")
    saved_fraction: float = Field(description="`saved` over `on_demand_cost` (0 when that is 0)")
    unpriced_attempts: int = Field(default=0, description=UNPRICED.replace("`cost`", "every amount here"))
    provisional: float = Field(
        default=0.0, description="dollars of `cost` charged for instances left for the cloud to take back: free if "
        "it does by `provisional_until`, charged to that time if not")
    provisional_until: float | None = Field(default=None, description="when the last of those is settled")

    @classmethod
    def of(cls, job_bill: JobBill) -> BillView:
        return cls(**job_bill.to_json())

    def to_bill(self) -> JobBill:
        return JobBill(
            self.spot_seconds, self.on_demand_seconds, self.cost, self.on_demand_cost, self.unpriced_attempts)


class NotifyView(BaseModel):
    """Where and of what the job's owner is told (spec `notify`)."""

    webhook: str  # its scheme and host only: the rest of a webhook URL (a Slack one's path) is its secret
    events: list[str]


class JobDetail(BaseModel):
    """A job with its attempts and its bill so far."""

    job: JobRow
    owner: str
    attempts: list[AttemptView]
    bill: BillView
    checkpoint_store: str | None = None  # where the job's checkpoints are kept (resolved when it was submitted)
    stuck: str | None = None  # why the controller cannot go on with the job, while that is its newest event
    notify: NotifyView | None = None


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


def clock_time(at: float | None, now: float | None = None) -> str:
    """A moment as the CLI writes it: the local wall-clock time, with its date unless it is of the day of `now`
    (default: the clock's), so that what is read a day later still says which day it was."""
    if not at:
        return "—"
    moment = datetime.fromtimestamp(at)
    today = datetime.fromtimestamp(time.time() if now is None else now).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M:%S")


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


def _stuck(session: Session, job_id: int) -> str | None:
    """The controller's newest word on the job when it is that it cannot drive it (`control.stuck`)."""
    newest = session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id.desc()).limit(1)).first()
    return newest.message if newest is not None and newest.kind == "stuck" else None
