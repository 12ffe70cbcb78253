"""Multi-node jobs: node slots and addresses on attempts, and the generations of a gang.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

Frozen at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("node_rank", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("address", sa.String(length=120), nullable=True))
        batch.add_column(sa.Column("rendezvous_port", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("generation_done", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("generation_exit_code", sa.Integer(), nullable=True))
    op.create_table(
        "generations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("members", sa.JSON(), nullable=False),
        sa.Column("master_addr", sa.String(length=120), nullable=False),
        sa.Column("master_port", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("stop_requested_at", sa.Float(), nullable=True),
        sa.Column("stop_reason", sa.Text(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_reason", sa.String(length=20), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_generations_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_generations"),
        sa.UniqueConstraint("job_id", "number", name="uq_generation_job_number"),
    )
    op.create_index("ix_generations_job_id", "generations", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_generations_job_id", table_name="generations")
    op.drop_table("generations")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("generation_exit_code")
        batch.drop_column("generation_done")
        batch.drop_column("rendezvous_port")
        batch.drop_column("address")
        batch.drop_column("node_rank")
