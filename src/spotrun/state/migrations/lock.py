"""One connection, holding a cross-process lock, for running schema migrations.

Several processes (the CLI, the controller daemon, a second CLI) may open the same
store at the same moment and each try to bring its schema up to date. Only one may
run the DDL; the others wait for it and then find nothing left to do.

- PostgreSQL: a transaction-scoped advisory lock (released by the commit), and the
  whole upgrade runs in that transaction (PostgreSQL has transactional DDL).
- SQLite: ``BEGIN EXCLUSIVE`` takes the database's write lock before alembic even
  reads its version table; the others block on their own ``BEGIN EXCLUSIVE`` (for
  up to the connection's busy timeout) and then read the version the winner wrote.
- Any other database: one transaction, no extra lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

# Arbitrary but fixed: every spotrun process must use the same key. (b"spotrun!" as an int64.)
ADVISORY_LOCK_KEY = int.from_bytes(b"spotrun!", "big", signed=True)


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside a transaction that holds the migration lock; committed when the block ends."""
    with engine.connect() as connection:
        _take_lock(connection)
        try:
            yield connection
        except BaseException:
            connection.rollback()
            raise
        connection.commit()


def _take_lock(connection: Connection) -> None:
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(ADVISORY_LOCK_KEY)))
    elif dialect == "sqlite":
        # pysqlite begins transactions lazily and never around DDL; an explicit BEGIN
        # makes the DDL transactional and takes the write lock now.
        connection.exec_driver_sql("BEGIN EXCLUSIVE")
    else:
        connection.begin()
