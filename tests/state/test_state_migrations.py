"""The shipped migrations build exactly the models' schema, re-run harmlessly and tolerate concurrent starts."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import JSON, Boolean, Float, Integer, MetaData, create_engine, inspect, select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from spotrun.state import Base, Job, Setting, Store, StoreUnavailable
from spotrun.state import store as store_module
from spotrun.state.migrations import (
    NotAStore, SchemaTooNew, alembic_config, current_revision, head_revision, upgrade_to_head,
)
from spotrun.state.migrations.lock import migration_connection

WORKER = Path(__file__).with_name("upgrade_worker.py")


def schema_differences(engine: Engine) -> list[object]:
    with engine.connect() as connection:
        return schema_differences_seen_by(connection)


def schema_differences_seen_by(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return compare_metadata(context, Base.metadata)


def test_migrated_schema_equals_the_models(store: Store) -> None:
    assert schema_differences(store.engine) == []
    assert current_revision(store.engine) == head_revision() is not None


def test_schema_comparison_notices_a_missing_index(store: Store) -> None:
    # Guards the test above: the comparison must be able to see a difference at all. It looks inside the transaction
    # that dropped the index, which PostgreSQL then rolls back: its database, shared by this process's tests, need
    # not be made again for the next one (SQLite commits DDL at once; each test has its own file).
    with store.engine.connect() as connection:
        connection.execute(text("DROP INDEX ix_events_at"))
        differences = schema_differences_seen_by(connection)
    assert [(kind, index.name) for kind, index in differences] == [("add_index", "ix_events_at")]


def test_upgrade_is_idempotent_and_keeps_data(store: Store) -> None:
    with store.session() as session:
        session.add(Setting(key="kept", value={"a": 1}))
    upgrade_to_head(store.engine)
    Store(store.url).dispose()
    assert current_revision(store.engine) == head_revision()
    with store.session() as session:
        assert session.scalars(select(Setting.value)).all() == [{"a": 1}]
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1


def test_downgrade_to_base_then_upgrade_again(store: Store) -> None:
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "base")
    assert set(inspect(store.engine).get_table_names()) == {"alembic_version"}
    assert current_revision(store.engine) is None
    upgrade_to_head(store.engine)
    assert schema_differences(store.engine) == []


def test_the_store_knows_the_newest_revision_and_skips_alembic_only_at_it(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert store_module.SCHEMA_HEAD == head_revision()
    upgrades: list[Engine] = []
    monkeypatch.setattr("spotrun.state.migrations.upgrade_to_head", upgrades.append)
    Store(store.url).dispose()
    assert upgrades == [], "a store at the newest revision was migrated again"
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "-1")
    Store(store.url).dispose()
    assert len(upgrades) == 1, "a store one revision behind was not migrated"
    back_at_head_if_shared(store)


def test_processes_upgrading_at_once_all_succeed(database_url: str, tmp_path: Path) -> None:
    go_file = tmp_path / "go"
    workers = [start_upgrade_worker(database_url, tmp_path / f"ready-{n}", go_file) for n in range(3)]
    wait_for_files([tmp_path / f"ready-{n}" for n in range(3)], timeout=30)
    go_file.touch()
    for worker in workers:
        assert_worker_succeeded(worker)
    assert_at_head_and_equal_to_models(database_url)


def writing_to_a_new_sqlite_database(path: Path) -> sqlite3.Connection:
    """A connection writing (a transaction open, its lock held) to a new database, still in rollback-journal mode."""
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE someone_elses (x)")
    return writer


def test_a_store_opened_while_another_process_creates_the_sqlite_database_waits_for_it(tmp_path: Path) -> None:
    # SQLite refuses the switch to WAL at once (no busy timeout) while another connection writes to a database in
    # rollback mode: without the retry this failed "database is locked", as three processes starting together did.
    path = tmp_path / "state.db"
    writer = writing_to_a_new_sqlite_database(path)
    finishing = threading.Timer(0.5, writer.execute, args=("COMMIT",))
    finishing.start()
    began = time.monotonic()
    store = Store(f"sqlite:///{path}")
    try:
        assert time.monotonic() - began >= 0.4
        assert current_revision(store.engine) == head_revision()
        with store.engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("SELECT count(*) FROM someone_elses")).scalar() == 0
    finally:
        finishing.join()
        store.dispose()
        writer.close()


def test_a_sqlite_lock_held_past_the_patience_fails_saying_the_database_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "SQLITE_BUSY_SECONDS", 0.3)
    path = tmp_path / "state.db"
    writer = writing_to_a_new_sqlite_database(path)
    try:
        with pytest.raises(StoreUnavailable, match="database is locked") as refused:
            Store(f"sqlite:///{path}")
        assert isinstance(refused.value.__cause__, OperationalError)
    finally:
        writer.execute("COMMIT")
        writer.close()
    with sqlite3.connect(path) as reader:  # the other process's table is untouched
        assert reader.execute("SELECT name FROM sqlite_master").fetchall() == [("someone_elses",)]


def test_upgrade_waits_while_another_process_holds_the_migration_lock(database_url: str, tmp_path: Path) -> None:
    store = Store(database_url, migrate=False)
    try:
        with migration_connection(store.engine) as connection:
            command.upgrade(alembic_config(connection), "head")  # done but not committed yet
            ready_file, go_file = tmp_path / "ready", tmp_path / "go"
            worker = start_upgrade_worker(database_url, ready_file, go_file)
            wait_for_files([ready_file], timeout=30)
            go_file.touch()
            time.sleep(0.5)
            assert worker.poll() is None, "the second upgrade did not wait for the lock"
        assert_worker_succeeded(worker)  # found the schema at head once the first committed
    finally:
        store.dispose()
    assert_at_head_and_equal_to_models(database_url)


def start_upgrade_worker(database_url: str, ready_file: Path, go_file: Path) -> subprocess.Popen[str]:
    args = [sys.executable, str(WORKER), database_url, str(ready_file), str(go_file)]
    return subprocess.Popen(args, stderr=subprocess.PIPE, text=True)


def assert_worker_succeeded(worker: subprocess.Popen[str]) -> None:
    _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr


def assert_at_head_and_equal_to_models(database_url: str) -> None:
    store = Store(database_url, migrate=False)
    try:
        assert current_revision(store.engine) == head_revision()
        assert schema_differences(store.engine) == []
    finally:
        store.dispose()


def wait_for_files(paths: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        assert time.monotonic() < deadline, f"workers not ready within {timeout} s"
        time.sleep(0.01)


def test_a_schema_newer_than_this_spotrun_is_refused_by_name(store: Store) -> None:
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(SchemaTooNew, match="9999_future"):
        upgrade_to_head(store.engine)
    with store.engine.begin() as connection:  # as it was, for the next test on PostgreSQL (back_at_head_if_shared)
        connection.execute(text("UPDATE alembic_version SET version_num = :head"), {"head": head_revision()})


def test_open_attempts_index_holds_only_attempts_not_ended(store: Store) -> None:
    # compare_metadata sees the index but not its WHERE clause; without it the index would cover every attempt.
    (index,) = [ix for ix in inspect(store.engine).get_indexes("attempts") if ix["name"] == "ix_attempts_open"]
    assert index["column_names"] == ["job_id"]
    where = index.get("dialect_options", {}).get(f"{store.engine.dialect.name}_where")
    assert str(where).strip("()").lower() == "ended_at is null", f"ix_attempts_open is not partial: WHERE {where}"


ROW_TABLES = ["jobs", "attempts", "instances", "events", "generations", "users", "api_tokens"]  # parents first
REFERENCES = {("attempts", "job_id"), ("instances", "attempt_id"), ("events", "job_id"), ("generations", "job_id"),
              ("api_tokens", "user_id")}


def a_value(table: str, column: dict[str, Any], row: int) -> object:
    """A value for `column` of row 1 or 2 of `table`; references point at row 1 of their parent."""
    kind = column["type"]
    if (table, column["name"]) in REFERENCES:
        return 1
    if column["name"] == "id":
        return f"i-{row}" if table == "instances" else row
    if column["name"] == "number":
        return row
    if isinstance(kind, Boolean):
        return True
    if isinstance(kind, Integer):
        return 7 + row
    if isinstance(kind, Float):
        return 1234.5 + row
    if isinstance(kind, JSON):
        return {"row": row}
    return f"{table}.{column['name']}.{row}"[: getattr(kind, "length", None) or None]


def fill_every_table(engine: Engine) -> dict[str, int]:
    tables = MetaData()
    tables.reflect(engine)
    with engine.begin() as connection:
        for name in ROW_TABLES:
            if name in tables.tables:
                columns = inspect(engine).get_columns(name)
                connection.execute(
                    tables.tables[name].insert(), [{c["name"]: a_value(name, c, row) for c in columns} for row in (1, 2)]
                )
    return row_counts(engine)


def row_counts(engine: Engine) -> dict[str, int]:
    present = set(inspect(engine).get_table_names())
    with engine.connect() as connection:
        return {name: connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one() for name in ROW_TABLES
                if name in present}


def back_at_head_if_shared(store: Store) -> None:
    """Upgrade PostgreSQL's database, which this process's tests share, back to the newest schema: the next test's
    store would make it again (~1 s). Each SQLite test has a file of its own."""
    if store.engine.dialect.name == "postgresql":
        upgrade_to_head(store.engine)


def migrate(store: Store, revision: str, down: bool = False) -> None:
    with migration_connection(store.engine) as connection:
        (command.downgrade if down else command.upgrade)(alembic_config(connection), revision)


@pytest.mark.parametrize("revision", ["0001", "0004", "0009"])
def test_an_upgrade_from_an_older_schema_keeps_every_row(database_url: str, revision: str) -> None:
    """On SQLite, changing `jobs` (0010) copied and dropped it, and with foreign keys on the drop emptied attempts,
    instances, events and generations. The older schema is made as that older spotrun made it, on an empty database
    (on SQLite, downgrading a migrated one took 3 times as long)."""
    store = Store(database_url, migrate=False)
    try:
        migrate(store, revision)
        before = fill_every_table(store.engine)
        assert before["attempts"] == before["events"] == 2
        Store(store.url).dispose()  # what opening the store with this spotrun does
        assert current_revision(store.engine) == head_revision()
        assert {name: count for name, count in row_counts(store.engine).items() if name in before} == before
        with store.session() as session:
            assert {attempt.number for attempt in session.get(Job, 1).attempts} == {1, 2}
    finally:
        store.dispose()


def test_a_downgrade_keeps_the_rows_of_the_tables_it_keeps(store: Store) -> None:
    before = fill_every_table(store.engine)
    migrate(store, "0009", down=True)
    assert row_counts(store.engine) == before
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM instances").scalar_one() == 2
    back_at_head_if_shared(store)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # a setting of SQLite's connections
def test_foreign_keys_are_on_again_once_a_migration_ran(store: Store) -> None:
    migrate(store, "0015", down=True)
    migrate(store, "head")
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1


def test_a_downgrade_below_64_bit_log_sizes_refuses_a_log_past_2_gib_naming_it_and_changes_nothing(store: Store) -> None:
    """PostgreSQL's INTEGER cannot hold such a size: the downgrade failed with "integer out of range", naming
    nothing. SQLite's INTEGER holds it, and the downgrade goes through there."""
    before = fill_every_table(store.engine)
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE attempts SET log_bytes = 3221225472 WHERE id = 2"))
    if store.engine.dialect.name == "sqlite":
        migrate(store, "0016", down=True)
        assert current_revision(store.engine) == "0016"
        return
    with pytest.raises(RuntimeError, match=r"the log of attempt 2 is over 2 GiB"):
        migrate(store, "0016", down=True)
    assert current_revision(store.engine) == head_revision()
    assert row_counts(store.engine) == before


def a_database_of_another_application(url: str, statements: list[str]) -> None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def what_is_stored(url: str) -> object:
    """A SQLite database's files and their bytes (WAL mode included), or a PostgreSQL database's tables and rows in
    every schema."""
    if url.startswith("sqlite"):
        path = Path(make_url(url).database)
        return {other.name: hashlib.sha256(other.read_bytes()).hexdigest() for other in path.parent.iterdir()}
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return {
                f"{schema}.{table}": connection.execute(text(f'SELECT * FROM "{schema}"."{table}"')).all()
                for schema, table in connection.execute(text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
                ))
            }
    finally:
        engine.dispose()


OTHER_APPLICATIONS = {
    "its own tables": ["CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)", "INSERT INTO notes VALUES (1, 'hi')"],
    "a table named as one of spotrun's": ["CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)"],
    "its own Alembic revision": ["CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
                                 "INSERT INTO alembic_version VALUES ('ae1027a6acf')",
                                 "CREATE TABLE notes (id INTEGER PRIMARY KEY)"],
    "a table spotrun could write to": ["CREATE TABLE settings (key VARCHAR(80) PRIMARY KEY, value TEXT)"],
    # Another Alembic numbering its revisions as spotrun does: at one spotrun would migrate from, or at its newest.
    "an Alembic revision of spotrun's first": ["CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
                                               "INSERT INTO alembic_version VALUES ('0001')",
                                               "CREATE TABLE notes (id INTEGER PRIMARY KEY)"],
    "spotrun's newest revision and a table of spotrun's": [
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
        f"INSERT INTO alembic_version VALUES ('{store_module.SCHEMA_HEAD}')",
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)",
    ],
}


@pytest.mark.parametrize("kind", OTHER_APPLICATIONS)
def test_a_database_of_another_application_is_refused_naming_it_and_left_as_it_was(
    database_url: str, kind: str,
) -> None:
    """Spotrun's tables were created beside the other application's (or, with a table of the same name, the
    migration failed but SQLite's WAL mode stayed): any database without spotrun's revision was migrated."""
    a_database_of_another_application(database_url, OTHER_APPLICATIONS[kind])
    before = what_is_stored(database_url)
    url = database_url.replace("postgres@", "postgres:secret@")  # trust auth: the password is not asked for
    with pytest.raises(NotAStore) as refused:
        Store(url)
    said = str(refused.value)
    assert f"cannot open the store {make_url(url).render_as_string(hide_password=True)}: the database " in said
    assert "spotrun does not change another application's database" in said and "secret" not in said
    assert what_is_stored(database_url) == before


@pytest.mark.parametrize("kind", OTHER_APPLICATIONS)
def test_a_store_opened_without_migrating_refuses_another_applications_database_before_writing_to_it(
    database_url: str, kind: str,
) -> None:
    """Opened without migrating, a store was never checked: its first connection switched SQLite to WAL mode, and its
    sessions wrote to the other application's table of the same name."""
    a_database_of_another_application(database_url, OTHER_APPLICATIONS[kind])
    before = what_is_stored(database_url)
    store = Store(database_url, migrate=False)  # connects to nothing yet
    try:
        with pytest.raises(NotAStore, match="spotrun does not change another application's database"):
            with store.session() as session:
                session.add(Setting(key="written", value="by spotrun"))
        with pytest.raises(NotAStore):
            store.engine.connect()
    finally:
        store.dispose()
    assert what_is_stored(database_url) == before


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # which tables each revision has: the same on both
def test_a_spotrun_database_at_every_revision_is_recognised_as_one(database_url: str) -> None:
    store = Store(database_url, migrate=False)
    try:
        for script in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions())):
            migrate(store, script.revision)
            with store.engine.connect() as connection:
                assert store_module._checked_revision(connection, database_url) == script.revision
    finally:
        store.dispose()


def with_search_path(url: str, search_path: str) -> str:
    """`url` with PostgreSQL's search_path set, as a user would set it, in its `options`."""
    parsed = make_url(url)
    options = f"{parsed.query.get('options', '')} -csearch_path={search_path}".strip()
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_on_postgresql_the_store_is_made_in_the_search_paths_first_schema_beside_another_application(
    postgresql_url: str,
) -> None:
    """Its check and Alembic read any schema on the search_path: another application's tables or revision in a
    later schema (public) refused a store its first schema was meant to hold."""
    a_database_of_another_application(postgresql_url, [
        *OTHER_APPLICATIONS["its own Alembic revision"], "INSERT INTO notes VALUES (7)", "CREATE SCHEMA tenant",
    ])
    before = what_is_stored(postgresql_url)
    url = with_search_path(postgresql_url, "tenant,public")
    Store(url).dispose()
    Store(url).dispose()  # at the newest revision: opened without migrating again
    after = what_is_stored(postgresql_url)
    assert {name: rows for name, rows in after.items() if not name.startswith("tenant.")} == before
    assert {name for name in after if name.startswith("tenant.")} == {
        f"tenant.{table}" for table in [*Base.metadata.tables, "alembic_version"]
    }
    assert after["tenant.alembic_version"] == [(head_revision(),)]


@pytest.mark.postgres
def test_on_postgresql_another_applications_schema_first_on_the_search_path_is_refused_and_left_as_it_was(
    postgresql_url: str,
) -> None:
    """A spotrun store in public, the search_path's second schema, passed the check for another application's
    schema, its first: the upgrade made its new tables there and moved public's revision past public's tables."""
    store = Store(postgresql_url, migrate=False)
    try:
        migrate(store, "0009")
    finally:
        store.dispose()
    a_database_of_another_application(postgresql_url, [
        "CREATE SCHEMA app", "CREATE TABLE app.notes (id INTEGER PRIMARY KEY)", "INSERT INTO app.notes VALUES (1)",
    ])
    before = what_is_stored(postgresql_url)
    with pytest.raises(NotAStore, match=r"the database \(its schema 'app', where spotrun makes its tables\) holds "
                                        r"tables \(notes\) but no spotrun schema version"):
        Store(with_search_path(postgresql_url, "app,public"))
    assert what_is_stored(postgresql_url) == before


@pytest.mark.postgres
def test_on_postgresql_a_search_path_naming_no_schema_that_exists_is_refused_naming_it(postgresql_url: str) -> None:
    with pytest.raises(StoreUnavailable, match=r"no schema its search_path names \(nowhere,elsewhere\) exists"):
        Store(with_search_path(postgresql_url, "nowhere,elsewhere"))
    assert what_is_stored(postgresql_url) == {}
