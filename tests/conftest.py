"""Shared fixtures: a fresh database (SQLite file, or a throwaway PostgreSQL database) and a migrated Store on it.

A test's store is a database migrated once per test process, not migrated again: running the migrations cost 50 ms
on SQLite and 130 ms on PostgreSQL per test, ~400 tests. On SQLite each test gets a copy of the migrated file. On
PostgreSQL each test gets the process's one migrated database, emptied first (TRUNCATE, ~35 ms), not a copy made with
CREATE DATABASE ... TEMPLATE, which writes the whole database through the WAL; and its sessions commit without waiting
for the WAL to reach the disk (synchronous_commit=off: what a transaction sees and what commits are unchanged, only a
crash of the server could lose the last commits). The PostgreSQL half of tests/control, tests/server and tests/state
took 126 s with copies, 115 s emptied, 95 s emptied without the wait (2 workers, one run each). The migrations
themselves are tested on empty databases (tests/state/test_state_migrations.py).
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}?options=-csynchronous_commit%3Doff"


_SCHEMA_OUTLINE = """
    SELECT string_agg(entry, ';' ORDER BY entry) FROM (
        SELECT table_name || '.' || column_name || ':' || data_type || ':' || is_nullable AS entry
            FROM information_schema.columns WHERE table_schema = 'public'
        UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'
        UNION ALL SELECT 'version ' || version_num FROM alembic_version
    ) AS outline
"""


class MigratedPostgresql:
    """This test process's PostgreSQL database at the newest schema, which its stores share one test at a time."""

    def __init__(self) -> None:
        self.name = ""
        self.outline = ""

    def create(self) -> None:
        self.name = f"spotrun_migrated_{uuid.uuid4().hex[:16]}"
        with _postgres_admin() as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        Store(_postgresql_url(self.name)).dispose()
        with self._connect() as connection:
            self.outline = connection.execute(_SCHEMA_OUTLINE).fetchone()[0]

    def drop(self) -> None:
        with _postgres_admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)))

    def emptied(self) -> str:
        """The database with no rows but Alembic's and every sequence at its start, as the migrations left it; made
        again if a test changed its schema or its recorded revision. Connections an earlier test left open are ended
        first, as DROP DATABASE ... WITH (FORCE) would end them."""
        with _postgres_admin() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.name,),
            )
        with self._connect() as connection:
            if connection.execute(_SCHEMA_OUTLINE).fetchone()[0] != self.outline:
                connection.close()
                self.drop()
                self.create()
                return self.name
            tables = [
                row[0]
                for row in connection.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
                )
            ]
            names = sql.SQL(", ").join(sql.Identifier(table) for table in tables)
            connection.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(names))
        return self.name

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(f"{POSTGRES_SERVER} dbname={self.name}", autocommit=True)


@pytest.fixture(scope="session")
def migrated_postgresql() -> Iterator[MigratedPostgresql]:
    database = MigratedPostgresql()
    database.create()
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
def postgresql_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """For a test with a `store`, this process's migrated database, emptied; for any other, a fresh empty database
    dropped (with FORCE) afterwards."""
    if "store" in request.fixturenames:
        yield _postgresql_url(request.getfixturevalue("migrated_postgresql").emptied())
        return
    name = f"spotrun_{uuid.uuid4().hex[:16]}"
    with _postgres_admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
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


@pytest.fixture(autouse=True)
def _no_real_price_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pricing an Azure size, or an EC2 type or GCE machine the catalog lacks, reads the cloud's price list; no test
    may reach the real one. A test that prices there points SPOTRUN_AZURE_PRICES_URL at
    `fakes_azure.FakeRetailPrices`, SPOTRUN_AWS_PRICING_URL at `fakes.FakeAwsPricing`, or `gcp_billing.LIST_PRICES`
    at `fakes_gcp.FakeBillingCatalog` and `FakeCompute`; others get a closed port."""
    from google.auth.credentials import AnonymousCredentials

    from spotrun.costs import aws_pricing, azure_retail, gcp_billing

    monkeypatch.setattr(azure_retail, "RETAIL_PRICES_URL", "http://127.0.0.1:9/api/retail/prices")
    monkeypatch.setattr(aws_pricing, "DEFAULT_ENDPOINT", "http://127.0.0.1:9")  # nor EC2's price list
    closed = {"api_endpoint": "http://127.0.0.1:9"}  # nor GCP's billing catalog, nor its machine types
    monkeypatch.setattr(gcp_billing, "LIST_PRICES", gcp_billing.GcpListPrices(
        credentials=AnonymousCredentials(), project="no-such-project", billing_options=closed, compute_options=closed,
    ))


class ImpatientSqlite:
    """A SQLite store whose connections wait 0.3 s, not 30, for another's write lock; `write_lock_held()`: another
    process's transaction holding that lock (a writer stalled mid-transaction), the store's writes failing meanwhile
    with "database is locked" while its reads go on (WAL)."""

    def __init__(self, path: Path) -> None:
        self.store = Store(f"sqlite:///{path}")

    @contextmanager
    def write_lock_held(self) -> Iterator[None]:
        other = sqlite3.connect(self.store.engine.url.database, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()


@pytest.fixture
def impatient_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ImpatientSqlite]:
    from spotrun.state import store as store_module

    monkeypatch.setattr(store_module, "SQLITE_BUSY_SECONDS", 0.3)
    impatient = ImpatientSqlite(tmp_path / "impatient.db")
    yield impatient
    impatient.store.dispose()
