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

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from spotrun.state.migrations.lock import migration_connection
from spotrun.state.store import SchemaTooNew, schema_revision

__all__ = ["SchemaTooNew", "alembic_config", "current_revision", "head_revision", "upgrade_to_head"]

SCRIPT_LOCATION = Path(__file__).resolve().parent


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
        _refuse_unknown_revision(connection, ScriptDirectory.from_config(config))
        command.upgrade(config, "head")


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for a database never migrated."""
    return schema_revision(engine)


def head_revision() -> str | None:
    """The newest revision shipped with this version of spotrun."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _refuse_unknown_revision(connection: Connection, scripts: ScriptDirectory) -> None:
    current = MigrationContext.configure(connection).get_current_revision()
    known = {script.revision for script in scripts.walk_revisions()}
    if current is not None and current not in known:
        raise SchemaTooNew(
            f"the database {connection.engine.url!r} is at schema revision {current!r}, which this spotrun does not "
            f"know (its newest is {scripts.get_current_head()!r}); upgrade spotrun to use this database"
        )
