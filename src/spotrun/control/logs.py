"""Attempt logs in the store: the chunks the agents send, kept at their byte offsets so that a retried chunk is
harmless, and read back from any offset. Every server on one store serves the same logs.

A log written before the store kept them (schema 0018) is a file under $SPOTRUN_HOME/logs; it is still read, and
an attempt that ran across the upgrade goes on in the store where its file ends.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from spotrun import config
from spotrun.state import Attempt, LogChunk


class LogGap(ValueError):
    """A chunk starts past the end of what is stored: an earlier chunk is missing."""


def append_chunk(session: Session, attempt_id: int, offset: int, data: bytes) -> int:
    """Store `data` at `offset` unless it is stored already; the log's size after. Raises LogGap on a hole. The
    attempt's row stays locked to the end of the transaction: chunks of one attempt are appended one at a time."""
    session.execute(  # a write takes the row's lock (PostgreSQL) or the database's (SQLite) before the size is read
        update(Attempt).where(Attempt.id == attempt_id).values(log_bytes=Attempt.log_bytes),
        execution_options={"synchronize_session": False},
    )
    size = session.scalar(select(Attempt.log_bytes).where(Attempt.id == attempt_id)) or 0
    if offset > size:
        raise LogGap(f"chunk at offset {offset} but only {size} bytes stored")
    if offset + len(data) <= size:
        return size  # a retry of a chunk already stored
    session.add(LogChunk(attempt_id=attempt_id, start=size, data=data[size - offset :]))
    session.execute(update(Attempt).where(Attempt.id == attempt_id).values(log_bytes=offset + len(data)),
                    execution_options={"synchronize_session": False})
    return offset + len(data)


def read_log(session: Session, attempt: Attempt, offset: int = 0) -> bytes:
    """The attempt's log from byte `offset` on (nothing past its end)."""
    file = legacy_log_path(attempt.job_id, attempt.number)
    from_file = b""
    if file.exists():
        with open(file, "rb") as fh:
            fh.seek(offset)
            from_file = fh.read()
    first = session.scalar(
        select(func.max(LogChunk.start)).where(LogChunk.attempt_id == attempt.id, LogChunk.start <= offset)
    )
    chunks = session.execute(
        select(LogChunk.start, LogChunk.data)
        .where(LogChunk.attempt_id == attempt.id, LogChunk.start >= (first if first is not None else offset))
        .order_by(LogChunk.start)
    ).all()
    stored = b"".join(data[max(offset - start, 0):] for start, data in chunks)
    return from_file + stored


def log_size(attempt: Attempt) -> int:
    """The attempt's log's size: what the store holds, which goes on from a file written before it, if longer."""
    file = legacy_log_path(attempt.job_id, attempt.number)
    return max(attempt.log_bytes or 0, file.stat().st_size if file.exists() else 0)


def legacy_log_path(job_id: int, attempt_number: int, root: Path | None = None) -> Path:
    """Where a log was kept before the store held them."""
    return (root or config.logs_dir()) / f"job-{job_id}" / f"attempt-{attempt_number:03d}.log"
