"""An attempt's log size as a 64-bit integer: PostgreSQL's 32-bit INTEGER refused the update that took a log past
2 GiB, and every later chunk of that log failed the same way.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.alter_column("log_bytes", type_=sa.BigInteger(), existing_type=sa.Integer(), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.alter_column("log_bytes", type_=sa.Integer(), existing_type=sa.BigInteger(), existing_nullable=False)
