"""Attempt logs in the store, as the chunks the agents send: on files under each server's $SPOTRUN_HOME/logs, two
servers on one store each held part of a log, and refused the chunks that followed the other's.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28

Frozen at this revision: never import the models here. Logs written as files before it are still read from there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "log_chunks",
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["attempt_id"], ["attempts.id"], name="fk_log_chunks_attempt_id_attempts",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("attempt_id", "start", name="pk_log_chunks"),
    )


def downgrade() -> None:
    op.drop_table("log_chunks")
