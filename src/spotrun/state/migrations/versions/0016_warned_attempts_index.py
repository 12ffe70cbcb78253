"""A partial index on the attempts that had an early warning: /metrics counts them by warning and end at every
scrape, out of every attempt the store keeps.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WARNED = sa.text("warned_at IS NOT NULL")


def upgrade() -> None:
    op.create_index("ix_attempts_warned", "attempts", ["warning", "end_reason"], postgresql_where=WARNED,
                    sqlite_where=WARNED)


def downgrade() -> None:
    op.drop_index("ix_attempts_warned", table_name="attempts")
