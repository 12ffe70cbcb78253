"""Which errors say the store could not serve for the moment, rather than that the code is wrong: the database away
or restarting, a lost connection, a deadlock, SQLite locked past its busy timeout, every pooled connection busy. The
server answers them 503 (`server.store_outages`); a controller that met one gives its agents' heartbeats time to be
heard again before it takes any attempt for lost (`Controller.watching_since`)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout


def is_store_outage(error: BaseException) -> bool:
    return isinstance(error, (OperationalError, PoolTimeout)) or (
        isinstance(error, DBAPIError) and error.connection_invalidated
    )
