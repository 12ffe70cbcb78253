"""The one store of truth: an SQLAlchemy engine over SQLite (default) or PostgreSQL, schema by Alembic."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from spotrun import config
from spotrun.state.models import Event


class Store:
    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self.url = url or config.database_url()
        self.engine = _make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if migrate:
            self.upgrade()

    def upgrade(self) -> None:
        """Bring the schema to the newest revision (idempotent, safe to run from several processes)."""
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


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
