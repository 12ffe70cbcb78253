"""The one store of truth: an SQLAlchemy engine over SQLite (default) or PostgreSQL, schema by Alembic."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from spotrun import config
from spotrun.state.models import Event


# The newest migration's revision (tests/state checks it is Alembic's head): a store already there is not migrated.
SCHEMA_HEAD = "0023"


class StoreUnavailable(RuntimeError):
    """The store cannot be opened: a URL no driver reads, a database that does not answer or is not one, or a
    SPOTRUN_HOME that cannot be a folder. The message names the store (its password hidden) and why."""


class SchemaTooNew(StoreUnavailable):
    """The database was migrated by a newer spotrun than this one."""


class Store:
    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        try:
            self.url = url or config.database_url()
        except OSError as error:  # SPOTRUN_HOME cannot be made
            raise StoreUnavailable(f"cannot open the store under $SPOTRUN_HOME: {error}") from error
        try:
            self.engine = _make_engine(self.url)
            self._sessions = sessionmaker(self.engine, expire_on_commit=False)
            if migrate:
                self.upgrade()
        except (SQLAlchemyError, OSError) as error:
            raise StoreUnavailable(f"cannot open the store {_shown(self.url)}: {_reason(error)}") from error

    def upgrade(self) -> None:
        """Bring the schema to the newest revision (idempotent, safe to run from several processes)."""
        if schema_revision(self.engine) == SCHEMA_HEAD:
            return  # nothing to do, and no need to load Alembic (~0.1 s of every CLI command)
        from spotrun.state.migrations import upgrade_to_head

        upgrade_to_head(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: committed when the block ends, rolled back if it raises."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()


def schema_revision(engine: Engine) -> str | None:
    """The revision Alembic recorded in the database; None for a database never migrated."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def add_event(
    session: Session,
    *,
    at: float,
    kind: str,
    message: str,
    job_id: int | None = None,
    attempt_id: int | None = None,
    data: dict[str, Any] | None = None,
) -> Event:
    ev = Event(job_id=job_id, attempt_id=attempt_id, at=at, kind=kind, message=message, data=data)
    session.add(ev)
    return ev


SQLITE_BUSY_SECONDS = 30.0  # how long a SQLite connection waits for another process's lock before failing


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def _reason(error: Exception) -> str:
    """The driver's own words (SQLAlchemy's wrapper adds its SQL and a link), else the error's."""
    original = getattr(error, "orig", None)
    text_of = str(original or error).strip().splitlines()
    return text_of[0] if text_of else type(error).__name__


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_SECONDS})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()  # the busy timeout is sqlite3.connect's `timeout` (_make_engine)
    _switch_to_wal(cursor, SQLITE_BUSY_SECONDS)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _switch_to_wal(cursor: Any, patience: float) -> None:
    """Put the database in WAL mode (a no-op once it is), waiting up to `patience` seconds for other processes.

    On a database still in rollback mode (a new one, while several processes create it at once) the switch needs an
    exclusive lock, and SQLite answers "database is locked" at once, without its busy timeout, while another
    connection writes: so the switch is retried here.
    """
    deadline = time.monotonic() + patience
    pause = 0.01
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.5)
