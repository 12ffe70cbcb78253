"""The GPUs an attempt's cloud attached apart from its machine type (GCE), so that the market other jobs learn from
is the machine with those GPUs: an N1 machine's V100 stockout said nothing of the same machine without a GPU.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("gpus", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("gpus")
