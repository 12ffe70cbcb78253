"""A spot attempt repriced while it ran: the seconds it held at earlier prices, and their dollars.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("earlier_price_seconds", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("earlier_price_dollars", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("earlier_price_dollars")
        batch.drop_column("earlier_price_seconds")
