"""The longest time an attempt's trainer went between two new checkpoints it reported: how much work a preemption
without notice can lose, which a deadline plan must be able to make up.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("longest_save_gap", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("longest_save_gap")
