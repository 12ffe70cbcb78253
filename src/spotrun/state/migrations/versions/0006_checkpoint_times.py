"""When each attempt reported its first and its newest checkpoint, and the first one's step: the trainer's step rate,
from which a job without an estimated duration gets one (steps of the whole run over steps per second).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("first_checkpoint_step", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("first_checkpoint_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("checkpoint_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("checkpoint_at")
        batch.drop_column("first_checkpoint_at")
        batch.drop_column("first_checkpoint_step")
