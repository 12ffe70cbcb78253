"""The one store of truth: an SQLAlchemy engine over SQLite (default) or PostgreSQL, schema by Alembic."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from spotrun import config
from spotrun.config import InvalidSetting
from spotrun.state.models import Event


# The newest migration's revision (tests/state checks it is Alembic's head): a store already there is not migrated.
SCHEMA_HEAD = "0025"

# The tables of spotrun's first revision, which every later one keeps: a database at a revision numbered as spotrun
# numbers its own but without them is another application's (whose Alembic may number its revisions 0001, ... too).
TABLES_OF_EVERY_REVISION = frozenset({"jobs", "attempts", "instances", "events", "controller_lease", "settings"})


class StoreUnavailable(RuntimeError):
    """The store cannot be opened: a URL no driver reads, a database that does not answer, is not one or is another
    application's, or a SPOTRUN_HOME that cannot be a folder. The message names the store (its password hidden) and why."""


class SchemaTooNew(StoreUnavailable):
    """The database was migrated by a newer spotrun than this one."""


class NotAStore(StoreUnavailable):
    """The database is another application's, which spotrun leaves as it is: it holds tables but no spotrun schema
    version, or a revision not spotrun's, or one of spotrun's without spotrun's tables."""


class BadDatabaseUrl(StoreUnavailable, InvalidSetting):
    """The database URL cannot be one (no URL, a database kind SQLAlchemy does not know) or names a driver that is not
    installed: a setting to change (the CLI's exit code 2), where a database that does not answer is not."""


class Store:
    """The store at `url`. Its database is recognised, as a spotrun store or an empty one, before anything is written
    to it: by `upgrade` when opened with `migrate` (the default), else before its engine's first connection is used;
    another application's is refused (`NotAStore`, `SchemaTooNew`) with nothing written to it."""

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        try:
            self.url = url or config.database_url()
        except OSError as error:  # SPOTRUN_HOME cannot be made
            raise StoreUnavailable(f"cannot open the store under $SPOTRUN_HOME: {error}") from error
        try:
            self.engine = _make_engine(self.url)
            self._recognised = False
            # First of the engine's connect listeners: SQLite's switch to WAL mode, which comes next, writes the file.
            event.listen(self.engine, "connect", self._recognise_before_first_use, insert=True)
            self._sessions = sessionmaker(self.engine, expire_on_commit=False)
            if migrate:
                self.upgrade()
        except (SQLAlchemyError, OSError) as error:
            raise StoreUnavailable(f"cannot open the store {shown_url(self.url)}: {driver_words(error)}") from error

    def upgrade(self) -> None:
        """Bring the schema to the newest revision (idempotent, safe to run from several processes). A database
        that is not a spotrun store, nor empty, is refused first, with nothing written to it (`NotAStore`)."""
        revision = self._recognised_revision()
        if revision == SCHEMA_HEAD:
            return  # nothing to do, and no need to load Alembic (~0.1 s of every CLI command)
        from spotrun.state.migrations import upgrade_to_head

        upgrade_to_head(self.engine)

    def _recognised_revision(self) -> str | None:
        """The database's spotrun revision (None: empty), or NotAStore / SchemaTooNew; read over a connection of its
        own, which writes nothing as it opens (the engine's would switch SQLite to WAL mode, which stays)."""
        with _connection_writing_nothing(self.url) as connection:
            revision = _checked_revision(connection, self.url)
        self._recognised = True
        return revision

    def _recognise_before_first_use(self, _dbapi_connection: Any, _record: Any) -> None:
        """A store opened without migrating refuses another application's database when its engine first connects,
        before that connection runs anything; raising here closes it and reaches whoever asked for it."""
        if not self._recognised:
            self._recognised_revision()

    @contextmanager
    def session(self, *, patience: float | None = None) -> Iterator[Session]:
        """A unit of work: committed when the block ends, rolled back if it raises. `patience` (SQLite): how long its
        writes wait for another's write lock, if not SQLITE_BUSY_SECONDS: a frequent write that the next one makes
        moot (a heartbeat) fails fast instead of holding a server thread through a stalled writer's lock."""
        session = self._sessions()
        if patience is not None and self.engine.dialect.name == "sqlite":
            _wait_for_locks(session, patience)
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
        schema = _creation_schema(connection, str(engine.url))
        return _recorded_revision(connection, schema, set(inspect(connection).get_table_names(schema=schema)))


def _creation_schema(connection: Connection, url: str) -> str | None:
    """The schema where spotrun's tables and Alembic's are made and read (the migrations run with the search_path
    pinned to it): on PostgreSQL the current schema, the first of the search_path that exists, not every schema it
    names; elsewhere None, the database's own."""
    if connection.dialect.name != "postgresql":
        return None
    schema = connection.exec_driver_sql("SELECT current_schema()").scalar()
    if schema is None:
        search_path = connection.exec_driver_sql("SHOW search_path").scalar()
        raise StoreUnavailable(
            f"cannot open the store {shown_url(url)}: no schema its search_path names ({search_path}) exists, so "
            "spotrun has nowhere to make its tables: create the schema, or name one that exists"
        )
    return schema


def _recorded_revision(connection: Connection, schema: str | None, tables: set[str]) -> str | None:
    if "alembic_version" not in tables:
        return None
    place = "" if schema is None else f"{connection.dialect.identifier_preparer.quote_schema(schema)}."
    return connection.execute(text(f"SELECT version_num FROM {place}alembic_version")).scalar()


def _checked_revision(connection: Connection, url: str) -> str | None:
    """The spotrun revision the database at `url` is at; None for an empty one. NotAStore for one holding tables
    but no revision, or a revision without spotrun's tables; SchemaTooNew (or NotAStore) for a revision spotrun does
    not know. On PostgreSQL only the schema spotrun would make its tables in counts (`_creation_schema`)."""
    schema = _creation_schema(connection, url)
    tables = set(inspect(connection).get_table_names(schema=schema))
    revision = _recorded_revision(connection, schema, tables)
    tables.discard("alembic_version")
    if revision is None and tables:
        raise NotAStore(
            f"cannot open the store {shown_url(url)}: {_place(schema)} holds tables ({_listed(tables)}) but no spotrun "
            f"schema version; {_LEFT_AS_IT_IS}"
        )
    if revision is not None and (missing := TABLES_OF_EVERY_REVISION - tables):
        raise NotAStore(
            f"cannot open the store {shown_url(url)}: {_place(schema)} is at schema revision {revision!r} but lacks "
            f"spotrun's tables ({_listed(missing)}), so another application's migrations wrote it; {_LEFT_AS_IT_IS}"
        )
    if revision not in (None, SCHEMA_HEAD):
        from spotrun.state.migrations import refuse_unknown_revision  # loads Alembic: only when it will migrate

        refuse_unknown_revision(revision, url)
    return revision


_LEFT_AS_IT_IS = "spotrun does not change another application's database: name an empty database or a spotrun store"


def _place(schema: str | None) -> str:
    return "the database" if schema is None else f"the database (its schema {schema!r}, where spotrun makes its tables)"


def _listed(tables: set[str] | frozenset[str]) -> str:
    names = sorted(tables)
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


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


def shown_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def driver_words(error: Exception) -> str:
    """The driver's own words (SQLAlchemy's wrapper adds its SQL and a link), else the error's."""
    original = getattr(error, "orig", None)
    text_of = str(original or error).strip().splitlines()
    return text_of[0] if text_of else type(error).__name__


@contextmanager
def _connection_writing_nothing(url: str) -> Iterator[Connection]:
    """A connection of an engine of its own, which sets nothing up as it connects, closed with its engine."""
    engine = create_engine(url, poolclass=NullPool, **_connect_args(url))
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def _make_engine(url: str) -> Engine:
    """The store's engine; BadDatabaseUrl, naming $SPOTRUN_DATABASE_URL if the URL is its, when the URL cannot be
    read or its driver is not installed (SQLAlchemy parses the URL and imports the driver here)."""
    try:
        if url.startswith("sqlite"):
            if _in_memory(url):
                raise BadDatabaseUrl(
                    f"{_named(url)} is refused: it names an in-memory SQLite database, which each process (this "
                    "command, the controller, the server) would open empty and lose at its exit; name a file: "
                    "sqlite:////path/to/state.db")
            engine = create_engine(url, **_connect_args(url))
            event.listen(engine, "connect", _sqlite_pragmas)
            event.listen(engine, "checkin", _patience_restored)
            return engine
        return create_engine(url, pool_pre_ping=True)
    except ImportError as missing:
        raise BadDatabaseUrl(
            f"{_named(url)} is refused: its driver {missing.name or missing} is not installed (for PostgreSQL, spotrun "
            "installs psycopg: postgresql+psycopg://...)"
        ) from None
    except (ArgumentError, NoSuchModuleError) as unreadable:
        raise BadDatabaseUrl(f"{_named(url)} is refused: {driver_words(unreadable)}") from None


def _in_memory(sqlite_url: str) -> bool:
    """Whether the SQLite URL names no file: no path, `:memory:`, or a `file:` URI opened in memory."""
    parsed = make_url(sqlite_url)
    database = parsed.database or ""
    return database in ("", ":memory:") or parsed.query.get("mode") == "memory" or database.startswith("file::memory:")


def _named(url: str) -> str:
    from_variable = url == os.environ.get(config.DATABASE_URL_VAR)  # else given, e.g. `server --database-url`
    return f"{config.DATABASE_URL_VAR}={shown_url(url)}" if from_variable else f"the database URL {shown_url(url)}"


def _connect_args(url: str) -> dict[str, Any]:
    return {"connect_args": {"timeout": SQLITE_BUSY_SECONDS}} if url.startswith("sqlite") else {}


_IMPATIENT = "impatient"  # a pooled SQLite connection's info: its busy timeout is to be put back at its check-in


def _wait_for_locks(session: Session, seconds: float) -> None:
    """The busy timeout of the SQLite connection `session` holds to its end, put back when the pool takes the
    connection back (`_patience_restored`)."""
    connection = session.connection()
    connection.exec_driver_sql(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    connection.connection.info[_IMPATIENT] = True


def _patience_restored(dbapi_connection: Any, record: Any) -> None:
    if record is not None and record.info.pop(_IMPATIENT, False):
        dbapi_connection.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_SECONDS * 1000)}")


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
