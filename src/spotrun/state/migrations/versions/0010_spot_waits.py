"""Whether a job waits because its policy waits for spot (as opposed to a backoff after a quota or launch error):
such a job is woken when another job of its market gets spot or frees a spot instance.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("waits_for_spot", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("waits_for_spot")
