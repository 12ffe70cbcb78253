"""Small helpers that write the controller's records: transitions, attempt ends, events."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from spotrun.control.reclaims import CLOUD_NOTICE_SOURCES
from spotrun.control.states import JobState, check_transition, is_terminal
from spotrun.state import Attempt, Job, add_event

ON_DEMAND = "on-demand"


def transition(session: Session, job: Job, target: JobState, now: float, reason: str, *,
               running_on: Sequence[Attempt] = ()) -> None:
    """Move the job through the state machine and log the move; a refused move raises IllegalTransition.
    `running_on`: for a move to RUNNING (and only for it), the attempts the job runs on, its node's or its gang's:
    the event names their market (`running_market`), which tells its notifications where it runs."""
    if (target == JobState.RUNNING) != bool(running_on):
        raise ValueError(f"job {job.id}: running_on names the attempts a move to RUNNING runs on, and only those; "
                         f"got {len(running_on)} for a move to {target.value}")
    previous = job.state
    job.state = check_transition(previous, target).value
    job.updated_at = now
    if is_terminal(target):
        job.finished_at = now
        job.not_before = None
    data = {"from": previous, "to": target.value}
    if running_on:
        data["market"] = running_market(running_on)
    add_event(
        session,
        at=now,
        kind="state",
        job_id=job.id,
        message=f"{previous} → {target.value}: {reason}" if previous != target.value else f"{target.value}: {reason}",
        data=data,
    )


def running_market(attempts: Iterable[Attempt]) -> str:
    """The market a job runs on: on-demand when any of its nodes is (a gang whose lost node was replaced on
    on-demand holds on-demand it would leave for spot), else spot."""
    return ON_DEMAND if any(attempt.market == ON_DEMAND for attempt in attempts) else "spot"


def open_attempts(session: Session, job_id: int) -> tuple[Attempt | None, Attempt | None]:
    """A single-node job's open attempts: the one it runs on (or is being placed on), and the standby launched to
    take over from it in a make-before-break move, if any. A standby whose predecessor has ended is the job's
    attempt."""
    attempts = session.scalars(
        select(Attempt).where(Attempt.job_id == job_id, Attempt.ended_at.is_(None)).order_by(Attempt.number)
    ).all()
    current = attempts[0] if attempts else None
    standby = next((a for a in attempts[1:] if current is not None and a.standby_for == current.id), None)
    return current, standby


def is_held(session: Session, attempt: Attempt) -> bool:
    """A standby whose predecessor is still open: its agent waits, restoring and running nothing."""
    if attempt.standby_for is None:
        return False
    predecessor = session.get(Attempt, attempt.standby_for)
    return predecessor is not None and predecessor.ended_at is None


def held_standbys(open_attempts: list[Attempt]) -> list[Attempt]:
    """Of a job's open attempts, the standbys held: those whose predecessor is open too (`is_held` over a list)."""
    open_ids = {a.id for a in open_attempts}
    return [a for a in open_attempts if a.standby_for is not None and a.standby_for in open_ids]


def ask_to_stop(session: Session, attempt: Attempt, reason: str, now: float) -> None:
    """Mark a running attempt "draining": its agent is told, in its next heartbeat's answer, to have the trainer
    checkpoint and stop (it then ends as "migrated"), so that the job can move."""
    attempt.state = "draining"
    if attempt.notice_source not in CLOUD_NOTICE_SOURCES:  # the cloud's notice stands: it decides the instance's end
        attempt.notice_at = now
        attempt.notice_source = f"move: {reason}"[:60]
    add_event(
        session, at=now, kind="move_requested", job_id=attempt.job_id, attempt_id=attempt.id,
        message=f"attempt {attempt.number}: asking the trainer to checkpoint and stop ({reason})",
    )


def next_attempt_number(session: Session, job_id: int) -> int:
    newest = session.scalar(select(func.max(Attempt.number)).where(Attempt.job_id == job_id))
    return (newest or 0) + 1


def end_attempt(session: Session, attempt: Attempt, *, reason: str, ended_at: float, billed_seconds: float) -> None:
    attempt.state = "ended"
    attempt.end_reason = reason
    attempt.ended_at = ended_at
    attempt.billed_seconds = max(billed_seconds, 0.0)
    add_event(
        session,
        at=ended_at,
        kind="attempt_ended",
        job_id=attempt.job_id,
        attempt_id=attempt.id,
        message=f"attempt {attempt.number} ({attempt.market}, {attempt.zone}) ended: {reason}"
        + (f", billed {attempt.billed_seconds:.0f} s" if attempt.started_at is not None else ""),
        data={"reason": reason, "billed_seconds": attempt.billed_seconds, "market": attempt.market, "zone": attempt.zone,
              "placed": attempt.started_at is not None},
    )
