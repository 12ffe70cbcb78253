"""The database's clock, for the times several machines write and compare in one store.

A claim or the controller's lease expires at a time the writer sets and a reader compares with its own now: with
workers on several machines sharing a PostgreSQL store, clocks that disagree by more than a claim's life let one
worker take another's live claims. The database's clock is one for all of them. SQLite lives on one machine, whose
clock every writer shares.
"""

from __future__ import annotations

import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session


def database_now(session: Session) -> float:
    """Unix seconds by the database's clock on PostgreSQL (as it is now, not as the transaction began); by this
    machine's on SQLite."""
    if session.get_bind().dialect.name != "postgresql":
        return time.time()
    return float(session.scalar(select(func.extract("epoch", func.clock_timestamp()))))
