"""The steps a job's whole run takes, as its newest checkpoint says (the SDK's progress: steps done / total).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("total_steps", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("total_steps")
