"""A partial index on the attempts still open (`ended_at IS NULL`), by job: a store keeps every attempt ever made,
and the controller reads the open ones of a job every tick and sweeps for open attempts of ended jobs.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN = sa.text("ended_at IS NULL")


def upgrade() -> None:
    op.create_index("ix_attempts_open", "attempts", ["job_id"], postgresql_where=OPEN, sqlite_where=OPEN)


def downgrade() -> None:
    op.drop_index("ix_attempts_open", table_name="attempts")
