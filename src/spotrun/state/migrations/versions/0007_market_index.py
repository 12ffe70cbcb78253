"""An index on the attempts of one market (provider, instance type) by time: each placement reads the market's
recent history, every job's tries of that instance type, to learn how long spot lasts there.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_attempts_market", "attempts", ["provider", "instance_type", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_attempts_market", table_name="attempts")
