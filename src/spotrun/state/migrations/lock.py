"""One connection, holding a cross-process lock, for running schema migrations.

Several processes (the CLI, the controller daemon, a second CLI) may open the same
store at the same moment and each try to bring its schema up to date. Only one may
run the DDL; the others wait for it and then find nothing left to do.

- PostgreSQL: a transaction-scoped advisory lock (released by the commit), and the
  whole upgrade runs in that transaction (PostgreSQL has transactional DDL).
- SQLite: ``BEGIN EXCLUSIVE`` takes the database's write lock before alembic even
  reads its version table; the others block on their own ``BEGIN EXCLUSIVE`` (for
  up to the connection's busy timeout) and then read the version the winner wrote.
  Foreign keys are off while it runs: SQLite changes a table by copying it and
  dropping the old one, and with them on that drop cascades to every row that
  refers to it (an upgrade through 0010 emptied attempts, instances and events).
- Any other database: one transaction, no extra lock.

On PostgreSQL the transaction's search_path is also pinned to its current schema (the first of the search_path that
exists), where the migrations make their tables: Alembic, which otherwise reads the first ``alembic_version`` of any
schema on the path, then reads and writes the version of the schema it migrates, the one the store checked.
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
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction: set it first
        try:
            _take_lock(connection)
            if connection.dialect.name == "postgresql":
                _pin_search_path_to_current_schema(connection)
            broken_before = _broken_references(connection) if sqlite else set()
            try:
                yield connection
                if sqlite and (broken := _broken_references(connection) - broken_before):
                    raise RuntimeError(f"the migration would leave rows referring to missing rows: {sorted(broken)[:5]}")
            except BaseException:
                connection.rollback()
                raise
            connection.commit()
        finally:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")  # the connection goes back to the pool


def _broken_references(connection: Connection) -> set[tuple[object, ...]]:
    return {tuple(row) for row in connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()}


def _pin_search_path_to_current_schema(connection: Connection) -> None:
    """Until the transaction ends; left as it is when no schema of the path exists (nowhere to migrate)."""
    connection.exec_driver_sql(
        "SELECT set_config('search_path', quote_ident(current_schema()), true) WHERE current_schema() IS NOT NULL"
    )


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
