"""The cursor of a job's webhook notifications (`notify:` in its spec): the newest event they are settled up to, so
that a restarted controller tells each happening once more at most, and none is lost; with a partial index on the
few jobs that have some still to settle.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-01

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOTIFYING = sa.text("notified_event_id IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("notified_event_id", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_notifying", "jobs", ["id"], postgresql_where=NOTIFYING, sqlite_where=NOTIFYING)


def downgrade() -> None:
    op.drop_index("ix_jobs_notifying", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("notified_event_id")
