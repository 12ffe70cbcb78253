"""Removing the logs of jobs that ended long ago: the store keeps every byte an agent sent (`control.logs`), and a
team server's store grows by them without end.

Only the log text goes. The job, its attempts, events and bill stay, and each pruned attempt keeps its log size and
the time its log was removed (`log_pruned_at`), so `spotrun logs` says what happened instead of printing nothing.
Jobs are pruned a batch at a time, each batch in its own transaction, so a large store is not locked for long. Logs
kept as files before the store held them (schema 0018) are deleted under this process's $SPOTRUN_HOME, which must
be the server's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from spotrun.control.logs import legacy_log_path
from spotrun.control.states import TERMINAL
from spotrun.state import Attempt, Job, LogChunk, Store, add_event

JOBS_PER_BATCH = 100


@dataclass(frozen=True)
class PrunedLogs:
    jobs: int = 0
    attempts: int = 0
    bytes: int = 0  # of log text, as the agents sent it

    def __add__(self, other: PrunedLogs) -> PrunedLogs:
        return PrunedLogs(self.jobs + other.jobs, self.attempts + other.attempts, self.bytes + other.bytes)


def prune_logs(store: Store, *, ended_before: float, now: float, dry_run: bool = False) -> PrunedLogs:
    """Remove the logs of the jobs that ended before `ended_before`; what was (with `dry_run`: would be) removed."""
    total, after_id = PrunedLogs(), 0
    while True:
        with store.session() as session:
            job_ids = _jobs_with_logs(session, ended_before, after_id)
            if not job_ids:
                return total
            pruned, files = _prune_jobs(session, job_ids, now, dry_run)
        for file in files:  # once the store no longer points to them
            file.unlink(missing_ok=True)
        total, after_id = total + pruned, job_ids[-1]


def _jobs_with_logs(session: Session, ended_before: float, after_id: int) -> list[int]:
    """The next batch of ended jobs (by id, past `after_id`) that still hold a log."""
    query = (
        select(Job.id)
        .join(Attempt, Attempt.job_id == Job.id)
        .where(
            Job.id > after_id,
            Job.state.in_([state.value for state in TERMINAL]),
            Job.finished_at < ended_before,
            Attempt.log_pruned_at.is_(None),
            Attempt.log_bytes > 0,
        )
        .group_by(Job.id)
        .order_by(Job.id)
        .limit(JOBS_PER_BATCH)
    )
    return list(session.scalars(query))


def _prune_jobs(session: Session, job_ids: list[int], now: float, dry_run: bool) -> tuple[PrunedLogs, list[Path]]:
    """What the batch's pruning removes, and the logs kept as files before 0018, to delete once it is committed."""
    unpruned = (Attempt.job_id.in_(job_ids), Attempt.log_pruned_at.is_(None), Attempt.log_bytes > 0)
    if dry_run:
        return _counted(session.scalars(select(Attempt).where(*unpruned)).all()), []
    # Marked first: the write takes the rows' locks (PostgreSQL) or the database's (SQLite), so a run at the same
    # time waits here and then finds these attempts pruned already.
    session.execute(update(Attempt).where(*unpruned).values(log_pruned_at=now),
                    execution_options={"synchronize_session": False})
    attempts = session.scalars(
        select(Attempt).where(Attempt.job_id.in_(job_ids), Attempt.log_pruned_at == now).order_by(Attempt.id)
    ).all()
    session.execute(delete(LogChunk).where(LogChunk.attempt_id.in_([attempt.id for attempt in attempts])))
    by_job: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        by_job[attempt.job_id].append(attempt)
    for job_id, its_attempts in sorted(by_job.items()):
        of_job = _counted(its_attempts)
        add_event(
            session, at=now, kind="logs_pruned", job_id=job_id,
            message=f"logs of {of_job.attempts} attempt(s) removed ({of_job.bytes} bytes): the job ended before "
            "the retention",
            data={"attempts": of_job.attempts, "bytes": of_job.bytes},
        )
    return _counted(attempts), [legacy_log_path(attempt.job_id, attempt.number) for attempt in attempts]


def _counted(attempts: Sequence[Attempt]) -> PrunedLogs:
    return PrunedLogs(len({attempt.job_id for attempt in attempts}), len(attempts),
                      sum(attempt.log_bytes for attempt in attempts))


def stored_log_bytes(session: Session) -> int:
    """The bytes of log text the store holds now, every attempt's together: the sizes the attempts keep, not a read
    of every chunk."""
    kept = select(func.coalesce(func.sum(Attempt.log_bytes), 0)).where(Attempt.log_pruned_at.is_(None))
    return int(session.scalar(kept) or 0)
