"""Which of a job's events its owner is told of (spec `notify`): the happenings its events say (detection), those the
job asked for (decision). Reads the store only; posting them is `webhooks`', when and how often `notifier`'s.

The happenings, as the controller records them:
- succeeded, failed, cancelled, preempted: a `state` event moving the job to SUCCEEDED, FAILED, CANCELLED or
  PREEMPTED (a gang's later nodes taken back while it is PREEMPTED already are `node_preempted`: not told again).
- fell_back: a `state` event moving a job that runs on spot (`use_spot`, fallback on-demand) to RUNNING on
  on-demand (the event's `market`, `records.running_market`: a gang's when any node is), when it last ran on spot or
  never ran: one per fallback, not one per gang node or restart.
- back_to_spot: a `state` event moving the job to RUNNING on spot when it last ran on on-demand.
Both are read from the moves to RUNNING, not from launches: a move's standby is launched while the job runs on, and
the move may be given up before it takes over (`move_abandoned`); the job then never ran on the standby's market.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.control.jobs import job_events
from spotrun.control.records import ON_DEMAND
from spotrun.control.states import JobState, is_terminal
from spotrun.policy.default import fell_back_to_on_demand
from spotrun.spec import JobSpec
from spotrun.state import Event, Job

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
    if event.kind != "state":
        return None
    data = event.data or {}
    if data.get("to") == JobState.RUNNING:
        return _market_change(session, event, spec)
    return _ENDED_IN.get(data.get("to"))


def _market_change(session: Session, running: Event, spec: JobSpec) -> str | None:
    market = (running.data or {}).get("market")
    if market is None:  # recorded before moves to RUNNING named their market
        return None
    previous = _market_before(session, running)
    if previous != ON_DEMAND and fell_back_to_on_demand(market, spec.spot.use_spot, spec.spot.fallback):
        return "fell_back"
    if market == "spot" and previous == ON_DEMAND:
        return "back_to_spot"
    return None


def _market_before(session: Session, running: Event) -> str | None:
    """The market of the job's move to RUNNING before this one; None when it had none (that named its market)."""
    market = Event.data["market"].as_string()
    return session.scalar(
        select(market)
        .where(Event.job_id == running.job_id, Event.id < running.id, Event.kind == "state", market.is_not(None))
        .order_by(Event.id.desc())
        .limit(1)
    )
