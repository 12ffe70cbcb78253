"""Where agents may report: the agents' API of every live controller worker.

An agent reports to the worker that launched its instance. When that worker is gone (stopped, crashed, a server
taken down), another worker takes its jobs over (`state.claims`), and the agent must reach that one before the
controller takes it for lost: so each worker announces its agents' API here, renewed as its claims are, and the
agents learn the live ones from the answers to their heartbeats, and fail over to them (`agent.client`). Every
worker serves the same store, so any of them takes any attempt's reports.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from spotrun.state.models import ControllerWorker

MAX_AGENT_URLS = 8  # told to an agent: enough to find a live worker, few enough for a boot configuration
FORGOTTEN_AFTER = 86400.0  # a worker gone this long is removed (each process start is a new worker)


def announce(session: Session, worker: str, agent_url: str, now: float, ttl: float) -> None:
    """`worker` serves agents at `agent_url` until `now + ttl` (the database's time, as claims are judged in)."""
    session.merge(ControllerWorker(worker=worker, agent_url=agent_url, expires_at=now + ttl))
    session.execute(delete(ControllerWorker).where(ControllerWorker.expires_at < now - FORGOTTEN_AFTER))


def withdraw(session: Session, worker: str) -> None:
    """`worker` stops: agents are no longer told of it."""
    session.execute(delete(ControllerWorker).where(ControllerWorker.worker == worker))


def live(session: Session, now: float) -> list[tuple[str, str]]:
    """(worker, agents' API URL) of every worker whose announcement runs at `now`, the most recently renewed first."""
    rows = session.execute(
        select(ControllerWorker.worker, ControllerWorker.agent_url)
        .where(ControllerWorker.expires_at >= now)
        .order_by(ControllerWorker.expires_at.desc())
    )
    return [(worker, url) for worker, url in rows]


def agent_urls(session: Session, now: float) -> list[str]:
    """The agents' APIs of the live workers, the most recently renewed first, each once."""
    return list(dict.fromkeys(url for _, url in live(session, now)))[:MAX_AGENT_URLS]
