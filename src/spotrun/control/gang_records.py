"""What a multi-node job's records say: its open attempts (the gang's nodes, and the standbys of a move), its
generations, and the one write both the gang and its moves make, stopping a generation."""

from __future__ import annotations

from sqlalchemy import select

from spotrun.control.records import held_standbys
from spotrun.state import Attempt, Generation, add_event


def open_attempts_by_rank(session, job_id: int) -> list[Attempt]:
    """Every open attempt of the job, by node rank: its nodes, and the standbys of a move under way."""
    return list(
        session.scalars(
            select(Attempt).where(Attempt.job_id == job_id, Attempt.ended_at.is_(None)).order_by(Attempt.node_rank)
        )
    )


def split_standbys(attempts: list[Attempt]) -> tuple[list[Attempt], list[Attempt]]:
    """(nodes, held standbys) of a gang's open attempts: once the node a standby takes over from has ended, the
    standby is the gang's node for its rank."""
    held = held_standbys(attempts)
    return [a for a in attempts if a not in held], held


def latest_generation(session, job_id: int) -> Generation | None:
    return session.scalars(
        select(Generation).where(Generation.job_id == job_id).order_by(Generation.number.desc())
    ).first()


def stop_generation(session, generation: Generation, reason: str, now: float) -> None:
    """Ask every rank of a running generation to stop (each agent reads it in its next heartbeat's answer)."""
    generation.state = "stopping"
    generation.stop_requested_at = now
    generation.stop_reason = reason
    add_event(
        session, at=now, kind="generation_stopping", job_id=generation.job_id,
        message=f"generation {generation.number}: {reason}; stopping every rank",
    )
