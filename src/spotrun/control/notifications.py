"""Which of a job's events its owner is told of (spec `notify`): the happenings its events say (detection), those the
job asked for (decision). Reads the store only; posting them is `webhooks`', when and how often `notifier`'s.

The happenings, as the controller records them:
- succeeded, failed, cancelled, preempted: a `state` event moving the job to SUCCEEDED, FAILED, CANCELLED or
  PREEMPTED (a gang's later nodes taken back while it is PREEMPTED already are `node_preempted`: not told again).
- fell_back: an `instance_launched` event of an on-demand instance for a job that runs on spot (`use_spot`, fallback
  on-demand), when its previous instance was spot or it had none: one per fallback, not one per gang node or restart.
- back_to_spot: an `instance_launched` event of a spot instance when the job's previous instance was on-demand.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.control.jobs import job_events
from spotrun.control.states import is_terminal
from spotrun.policy.default import fell_back_to_on_demand
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Event, Job

_ENDED_IN = {"SUCCEEDED": "succeeded", "FAILED": "failed", "CANCELLED": "cancelled", "PREEMPTED": "preempted"}


@dataclass(frozen=True)
class Notification:
    event_id: int
    name: str  # one of `spec.notify.NOTIFY_EVENTS`
    at: float
    message: str


@dataclass(frozen=True)
class Backlog:
    """A job's notifications due, oldest first, and the event id its cursor is settled up to once they are told (or
    given up). `ended`: the job had ended when its events were read, so that no notification can follow them."""

    job_id: int
    notifications: tuple[Notification, ...]
    read_after: int  # the cursor the job's events were read from
    settles_to: int
    ended: bool

    @property
    def moves_cursor(self) -> bool:
        return self.settles_to > self.read_after or self.ended


def backlog(session: Session, job: Job, spec: JobSpec) -> Backlog:
    """The notifications the job's events past its cursor call for (`job_events`: none a transaction may still
    commit before them is passed); `spec`: the job's."""
    after = job.notified_event_id or 0
    wanted = set(spec.notify.events) if spec.notify is not None else set()
    events = job_events(session, job.id, after)
    due = tuple(
        Notification(event.id, name, event.at, event.message)
        for event in events if (name := happening(session, event, spec)) in wanted
    )
    return Backlog(job.id, due, after, events[-1].id if events else after, is_terminal(job.state))


def happening(session: Session, event: Event, spec: JobSpec) -> str | None:
    """The notification name of what the event records; None for one that is none of them."""
    if event.kind == "state":
        return _ENDED_IN.get((event.data or {}).get("to"))
    if event.kind == "instance_launched" and event.attempt_id is not None:
        return _market_change(session, event.attempt_id, spec)
    return None


def _market_change(session: Session, attempt_id: int, spec: JobSpec) -> str | None:
    attempt = session.get(Attempt, attempt_id)
    if attempt is None:
        return None
    previous = session.scalar(
        select(Attempt.market)
        .where(Attempt.job_id == attempt.job_id, Attempt.number < attempt.number, Attempt.started_at.is_not(None))
        .order_by(Attempt.number.desc())
        .limit(1)
    )
    on_demand = "on-demand"
    if previous != on_demand and fell_back_to_on_demand(attempt.market, spec.spot.use_spot, spec.spot.fallback):
        return "fell_back"
    if attempt.market == "spot" and previous == on_demand:
        return "back_to_spot"
    return None
