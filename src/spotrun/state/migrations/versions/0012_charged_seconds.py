"""What the cloud charged for an attempt's instance (its billing rule applied to the seconds held), and when an
instance left for the cloud to reclaim is to be terminated if the cloud has not taken it (with an index of those
instances: every tick reads them).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


AWAITING = sa.text("state = 'awaiting_reclaim'")


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("charged_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("release_at", sa.Float(), nullable=True))
    op.create_index("ix_instances_awaiting_reclaim", "instances", ["id"], postgresql_where=AWAITING,
                    sqlite_where=AWAITING)


def downgrade() -> None:
    op.drop_index("ix_instances_awaiting_reclaim", table_name="instances")
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("release_at")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("charged_seconds")
