"""Shared fixtures: a fresh database (SQLite file, or a throwaway PostgreSQL database) and a migrated Store on it."""

from __future__ import annotations

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


@pytest.fixture
def postgresql_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped (with FORCE) afterwards."""
    name = f"spotrun_{uuid.uuid4().hex[:16]}"
    with _postgres_admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with _postgres_admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database's SQLAlchemy URL; every test using it runs on SQLite and on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    """A Store migrated to the newest schema on an empty database."""
    store = Store(database_url)
    yield store
    store.dispose()
