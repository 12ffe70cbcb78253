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
    if op.get_bind().dialect.name != "sqlite":  # SQLite's INTEGER is 64-bit whatever the declared type
        _refuse_logs_past_2_gib()
    with op.batch_alter_table("attempts") as batch:
        batch.alter_column("log_bytes", type_=sa.Integer(), existing_type=sa.BigInteger(), existing_nullable=False)


def _refuse_logs_past_2_gib() -> None:
    """A 32-bit size would fail the downgrade with "integer out of range", naming no attempt."""
    too_long = op.get_bind().execute(
        sa.text("SELECT id FROM attempts WHERE log_bytes > 2147483647 ORDER BY id")
    ).scalars().all()
    if too_long:
        ids = ", ".join(str(attempt_id) for attempt_id in too_long[:10]) + (" and more" if len(too_long) > 10 else "")
        whose = f"the logs of attempts {ids} are" if len(too_long) > 1 else f"the log of attempt {ids} is"
        raise RuntimeError(
            f"cannot downgrade below revision 0017: {whose} over 2 GiB, a size a 32-bit column cannot hold; "
            "nothing was changed"
        )
