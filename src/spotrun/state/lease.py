"""The controller lease: which controller process may drive jobs, decided by compare-and-set in the store.

A controller calls `try_acquire` on every tick; it keeps the lease by renewing it before
`ttl` runs out, and loses it to anyone who calls after it has expired. The outcome holds
once the caller's transaction commits (e.g. at the end of a `Store.session()` block).

Correct under concurrency on SQLite and PostgreSQL without locks held in Python:
taking an existing row is one conditional UPDATE whose row count says who won, and
creating a missing row is an INSERT that yields to the primary key when another process
created it first. On SQLite call it first thing in a transaction: a transaction that
has already read may fail to upgrade to the write lock ("database is locked").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import case, or_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from spotrun.state.models import ControllerLease

# Inserts that do nothing (row count 0) instead of failing when the primary key exists.
_INSERT_IF_ABSENT: dict[str, Callable[[Any], Insert]] = {
    "postgresql": lambda table: postgresql.insert(table).on_conflict_do_nothing(),
    "sqlite": lambda table: sqlite.insert(table).on_conflict_do_nothing(),
}


def try_acquire(
    session: Session, name: str, holder: str, pid: int | None, url: str | None, now: float, ttl: float
) -> bool:
    """Take or renew lease `name` for `holder` until `now + ttl`; False when someone else holds it unexpired."""
    if not name or not holder:
        raise ValueError(f"lease name and holder must be non-empty (name={name!r}, holder={holder!r})")
    if ttl <= 0:
        raise ValueError(f"lease ttl must be positive seconds, got {ttl!r}")
    arguments = (session, name, holder, pid, url, now, ttl)
    return _take_existing(*arguments) or _create(*arguments)


def release(session: Session, name: str, holder: str) -> bool:
    """Give lease `name` up if `holder` has it (so a successor need not wait for expiry); False if it did not."""
    statement = (
        update(ControllerLease)
        .where(ControllerLease.name == name, ControllerLease.holder == holder)
        .values(holder=None, pid=None, url=None, expires_at=0.0, acquired_at=None)
    )
    return _rows_changed(session, statement) == 1


def read(session: Session, name: str) -> ControllerLease | None:
    """The lease row as stored now (refreshed even if this session loaded it before), or None if never taken."""
    return session.get(ControllerLease, name, populate_existing=True)


def _take_existing(
    session: Session, name: str, holder: str, pid: int | None, url: str | None, now: float, ttl: float
) -> bool:
    lease = ControllerLease
    statement = (
        update(lease)
        .where(
            lease.name == name,
            or_(lease.holder == holder, lease.holder.is_(None), lease.expires_at < now),
        )
        .values(
            holder=holder,
            pid=pid,
            url=url,
            expires_at=now + ttl,
            # A renewal keeps the time the holder first took the lease.
            acquired_at=case((lease.holder == holder, lease.acquired_at), else_=now),
        )
    )
    return _rows_changed(session, statement) == 1


def _create(
    session: Session, name: str, holder: str, pid: int | None, url: str | None, now: float, ttl: float
) -> bool:
    dialect = session.get_bind().dialect.name
    if dialect not in _INSERT_IF_ABSENT:
        raise ValueError(f"the controller lease supports {sorted(_INSERT_IF_ABSENT)}, not database {dialect!r}")
    statement = _INSERT_IF_ABSENT[dialect](ControllerLease.__table__).values(
        name=name, holder=holder, pid=pid, url=url, expires_at=now + ttl, acquired_at=now
    )
    return _rows_changed(session, statement) == 1


def _rows_changed(session: Session, statement: Any) -> int:
    # synchronize_session=False: the statement's WHERE decides, not objects this session happens to hold.
    # preserve_rowcount: SQLAlchemy reports -1 for an INSERT's row count unless asked to keep it.
    options = {"synchronize_session": False, "preserve_rowcount": True}
    result = session.execute(statement, execution_options=options)
    return cast(CursorResult[Any], result).rowcount


def take_over(
    session: Session, name: str, dead_holder: str, holder: str, pid: int | None, url: str | None, now: float, ttl: float
) -> bool:
    """Take lease `name` from `dead_holder` before it expires (the caller knows that process is gone)."""
    statement = (
        update(ControllerLease)
        .where(ControllerLease.name == name, ControllerLease.holder == dead_holder)
        .values(holder=holder, pid=pid, url=url, expires_at=now + ttl, acquired_at=now)
    )
    return _rows_changed(session, statement) == 1
