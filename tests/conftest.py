"""Shared fixtures: a fresh database (SQLite file, or a throwaway PostgreSQL database) and a migrated Store on it.

A test's store is a copy of a database migrated once per test process (a SQLite file copied, a PostgreSQL database
created from a template), not migrated again: running the migrations cost 50 ms on SQLite and 130 ms on PostgreSQL
per test, ~400 tests. The migrations themselves are tested on empty databases (tests/state/test_state_migrations.py).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from spotrun.state import Store

POSTGRES_SERVER = "host=127.0.0.1 port=5432 user=postgres"
POSTGRES_ADMIN_DB = "test"


def _postgres_admin() -> psycopg.Connection:
    """An autocommit connection to the admin database, or a skip saying why the server cannot be used."""
    try:
        return psycopg.connect(f"{POSTGRES_SERVER} dbname={POSTGRES_ADMIN_DB}", autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL unreachable at 127.0.0.1:5432 (user postgres, db {POSTGRES_ADMIN_DB}): {error}")


def _postgresql_url(name: str) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


@pytest.fixture(scope="session")
def migrated_postgresql() -> Iterator[str]:
    """The name of a PostgreSQL database migrated to the newest schema, for this test process's stores to copy."""
    name = f"spotrun_migrated_{uuid.uuid4().hex[:16]}"
    with _postgres_admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        Store(_postgresql_url(name)).dispose()  # no connection may stay open to a template
        yield name
    finally:
        with _postgres_admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def postgresql_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped (with FORCE) afterwards: empty, or for a test with a
    `store`, a copy of the migrated one."""
    name = f"spotrun_{uuid.uuid4().hex[:16]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if "store" in request.fixturenames:
        template = request.getfixturevalue("migrated_postgresql")
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
    with _postgres_admin() as admin:
        admin.execute(create)
    try:
        yield _postgresql_url(name)
    finally:
        with _postgres_admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the newest schema, for this test process's stores to copy."""
    path = tmp_path_factory.mktemp("migrated") / "state.db"
    Store(f"sqlite:///{path}").dispose()
    assert not path.with_name("state.db-wal").exists(), "the migrated file is not whole without its WAL"
    return path


@pytest.fixture
def sqlite_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file's URL: no file yet, or for a test with a `store`, a copy of the migrated one."""
    path = tmp_path / "state.db"
    if "store" in request.fixturenames:
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database's SQLAlchemy URL; every test using it runs on SQLite and on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    """A Store at the newest schema on a database of its own (a copy of the migrated one)."""
    store = Store(database_url)
    yield store
    store.dispose()
