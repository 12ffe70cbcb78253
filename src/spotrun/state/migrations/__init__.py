"""The store's schema migrations (Alembic), shipped inside the package.

At runtime nothing needs an ``alembic.ini``: `upgrade_to_head` builds the Alembic
configuration in code, points ``script_location`` at this folder and hands env.py
an open connection through ``config.attributes["connection"]``.

For developers, the ``alembic`` command works through the ini file next to this module;
the database is ``-x url=...``, else ``$SPOTRUN_DATABASE_URL``, else the default SQLite store::

    alembic -c src/spotrun/state/migrations/alembic.ini -x url=sqlite:///tmp/dev.db upgrade head
    alembic -c src/spotrun/state/migrations/alembic.ini -x url=sqlite:///tmp/dev.db \\
        revision --autogenerate --rev-id 0002 -m "add prices"

Then read and clean the generated file in versions/ (autogenerate is a draft), set
``SCHEMA_HEAD`` in ``spotrun/state/store.py`` to the new revision (a store already at it
opens without loading Alembic) and run ``pytest tests/state`` - it checks that the migrated
schema equals the models on SQLite and PostgreSQL, and that ``SCHEMA_HEAD`` is the head.
"""

from __future__ import annotations

import re
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from spotrun.state.migrations.lock import migration_connection
from spotrun.state.store import NotAStore, SchemaTooNew, schema_revision, shown_url

__all__ = [
    "NotAStore", "SchemaTooNew", "alembic_config", "current_revision", "head_revision", "refuse_unknown_revision",
    "upgrade_to_head",
]

SCRIPT_LOCATION = Path(__file__).resolve().parent
SPOTRUN_REVISION = re.compile(r"\d{4}(_\w+)?")  # the form of spotrun's revision ids: 0001, ...; Alembic's own are hex


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for this folder; with `connection`, env.py migrates over it."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade_to_head(engine: Engine) -> None:
    """Bring the schema to the newest revision. Idempotent; safe when several processes call it at once."""
    with migration_connection(engine) as connection:
        config = alembic_config(connection)
        refuse_unknown_revision(MigrationContext.configure(connection).get_current_revision(), str(engine.url))
        command.upgrade(config, "head")


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for a database never migrated."""
    return schema_revision(engine)


def head_revision() -> str | None:
    """The newest revision shipped with this version of spotrun."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def refuse_unknown_revision(current: str | None, url: str) -> None:
    """SchemaTooNew for a revision past this spotrun's (spotrun's are numbered: 0001, ...), NotAStore for any other
    it does not know (another application's Alembic)."""
    scripts = ScriptDirectory.from_config(alembic_config())
    if current is None or current in {script.revision for script in scripts.walk_revisions()}:
        return
    head = scripts.get_current_head()
    if SPOTRUN_REVISION.fullmatch(current):
        raise SchemaTooNew(
            f"the database {shown_url(url)} is at schema revision {current!r}, which this spotrun does not know (its "
            f"newest is {head!r}); upgrade spotrun to use this database"
        )
    raise NotAStore(
        f"cannot open the store {shown_url(url)}: the database is at schema revision {current!r}, which is not "
        f"spotrun's (spotrun's are 0001 to {head}); spotrun does not change another application's database: name an "
        "empty database or a spotrun store"
    )
