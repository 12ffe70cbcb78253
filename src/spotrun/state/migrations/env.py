"""Alembic's entry point: runs the migrations over the connection spotrun passes, or one of its own for the CLI."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from spotrun import config as spotrun_config
from spotrun.state.migrations.lock import migration_connection
from spotrun.state.models import Base

alembic_config = context.config
target_metadata = Base.metadata


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # Batch mode lets ALTERs work on SQLite (copy-and-move); on PostgreSQL it runs them directly.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def cli_database_url() -> str:
    return context.get_x_argument(as_dictionary=True).get("url") or spotrun_config.database_url()


def run_from_cli_online() -> None:
    engine = create_engine(cli_database_url(), poolclass=pool.NullPool)
    try:
        with migration_connection(engine) as connection:
            run_migrations(connection)
    finally:
        engine.dispose()


def run_from_cli_offline() -> None:
    context.configure(
        url=cli_database_url(),
        target_metadata=target_metadata,
        render_as_batch=True,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


given_connection = alembic_config.attributes.get("connection")
if given_connection is not None:
    run_migrations(given_connection)
else:
    if alembic_config.config_file_name is not None:
        fileConfig(alembic_config.config_file_name, disable_existing_loggers=False)
    if context.is_offline_mode():
        run_from_cli_offline()
    else:
        run_from_cli_online()
