"""When the delivery of a job's next notification (the one past its cursor) first failed, so that the bound on
retrying it holds across controller restarts and across workers.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("notify_failing_since", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("notify_failing_since")
