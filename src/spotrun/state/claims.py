"""Job claims: which controller worker drives which job. Several workers share one database; each job is driven
by at most one of them at a time, and the jobs of a worker that died are taken over once its claims expire.

Taking jobs is one UPDATE over a `SELECT … FOR UPDATE SKIP LOCKED` (PostgreSQL: concurrent workers skip each
other's rows instead of waiting or double-claiming); SQLite has one writer at a time, so the same conditional
UPDATE is already exclusive there (its dialect renders no FOR UPDATE; `holds` writes to lock). Which states are
live is the caller's rule.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from spotrun.state.models import Job
from spotrun.state.write_lock import take_sqlite_write_lock


def claim_jobs(
    session: Session, worker: str, now: float, ttl: float, *, live_states: Collection[str], batch: int = 100
) -> list[int]:
    """Renew this worker's claims, take up to `batch` unclaimed or expired live jobs, return the ids it holds."""
    expires = now + ttl
    renew(session, worker, now, ttl, live_states=live_states)
    free = (
        select(Job.id)
        .where(
            Job.state.in_(live_states),
            or_(Job.claimed_by.is_(None), Job.claim_expires_at < now),
        )
        .order_by(Job.id)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    session.execute(
        update(Job).where(Job.id.in_(free.scalar_subquery())).values(claimed_by=worker, claim_expires_at=expires),
        execution_options={"synchronize_session": False},
    )
    return held_jobs(session, worker, now, live_states=live_states)


def renew(session: Session, worker: str, now: float, ttl: float, *, live_states: Collection[str]) -> None:
    """Extend every claim `worker` still holds (one that another worker took over is no longer its own)."""
    session.execute(
        update(Job)
        .where(Job.claimed_by == worker, Job.state.in_(live_states))
        .values(claim_expires_at=now + ttl),
        execution_options={"synchronize_session": False},
    )


def held_jobs(session: Session, worker: str, now: float, *, live_states: Collection[str]) -> list[int]:
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.claimed_by == worker, Job.claim_expires_at >= now, Job.state.in_(live_states))
            .order_by(Job.id)
        )
    )


def holds(session: Session, worker: str, job_id: int, now: float, *, lock: bool = False) -> bool:
    """Whether `worker` still holds the job's claim (checked before each step: a worker that stalled past its
    claim must not act on a job another worker has taken over). With `lock`, the job's row stays locked to the end
    of the transaction: no worker takes the claim before what this transaction writes for the job is committed.
    PostgreSQL locks the row (FOR UPDATE); SQLite the whole database (`take_sqlite_write_lock`), held to the commit."""
    if lock:
        take_sqlite_write_lock(session)
    query = select(Job.claimed_by, Job.claim_expires_at).where(Job.id == job_id)
    row = session.execute(query.with_for_update() if lock else query).first()
    return row is not None and row.claimed_by == worker and (row.claim_expires_at or 0.0) >= now


def release_all(session: Session, worker: str) -> int:
    result = session.execute(
        update(Job).where(Job.claimed_by == worker).values(claimed_by=None, claim_expires_at=None),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount


def holders(session: Session) -> list[str]:
    return [h for h in session.scalars(select(Job.claimed_by).where(Job.claimed_by.is_not(None)).distinct()) if h]


def notifying_jobs(
    session: Session, worker: str | None, now: float, ttl: float, *, live_states: Collection[str]
) -> list[int]:
    """The jobs with notifications to settle (`Job.notified_event_id` set) that `worker` tells: the live ones whose
    claim it holds (the jobs it drives), and the ended ones whose claim it holds, held last, or finds free or expired,
    which it claims (again) for as long as they have some: the claim of an ended job is renewed by nothing else. A
    lone controller (`worker` None) tells every job's."""
    notifying = Job.notified_event_id.is_not(None)
    if worker is None:
        return list(session.scalars(select(Job.id).where(notifying).order_by(Job.id)))
    claimable = (notifying, Job.state.not_in(live_states),
                 or_(Job.claimed_by == worker, Job.claimed_by.is_(None), Job.claim_expires_at < now))
    # read first: a write at every tick, with nothing to claim, would take SQLite's one write lock for nothing
    if session.scalar(select(Job.id).where(*claimable).limit(1)) is not None:
        session.execute(
            update(Job).where(*claimable).values(claimed_by=worker, claim_expires_at=now + ttl),
            execution_options={"synchronize_session": False},
        )
    held = select(Job.id).where(notifying, Job.claimed_by == worker, Job.claim_expires_at >= now)
    return list(session.scalars(held.order_by(Job.id)))
