"""Job claims: several controller workers over one database, each job driven by one worker at a time.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("claim_expires_at", sa.Float(), nullable=True))
        batch.create_index("ix_jobs_claimed_by", ["claimed_by"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_claimed_by")
        batch.drop_column("claim_expires_at")
        batch.drop_column("claimed_by")
