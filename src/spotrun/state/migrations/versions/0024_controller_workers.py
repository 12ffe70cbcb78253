"""Controller workers' agents' APIs, so that an agent whose worker is gone reports to another (`state.workers`).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "controller_workers",
        sa.Column("worker", sa.String(length=200), nullable=False),
        sa.Column("agent_url", sa.String(length=200), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("worker", name="pk_controller_workers"),
    )
    op.create_index("ix_controller_workers_expires_at", "controller_workers", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_controller_workers_expires_at", table_name="controller_workers")
    op.drop_table("controller_workers")
