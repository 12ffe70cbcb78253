"""The first early warning an attempt's agent reported (not a preemption: EC2's rebalance recommendation, ...).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("warned_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("warning", sa.String(130), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("warning")
        batch.drop_column("warned_at")
