"""Initial schema: jobs, attempts, instances, events, controller_lease, settings.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Frozen copy of spotrun.state.models at this revision: never import the models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("not_before", sa.Float(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("restarts_on_error", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("capacity_rounds", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])

    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("zone", sa.String(length=80), nullable=False),
        sa.Column("market", sa.String(length=20), nullable=False),
        sa.Column("instance_type", sa.String(length=80), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("on_demand_price_per_hour", sa.Float(), nullable=False),
        sa.Column("max_price", sa.Float(), nullable=True),
        sa.Column("client_token", sa.String(length=80), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("instance_id", sa.String(length=120), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("agent_started_at", sa.Float(), nullable=True),
        sa.Column("last_heartbeat_at", sa.Float(), nullable=True),
        sa.Column("notice_at", sa.Float(), nullable=True),
        sa.Column("notice_source", sa.String(length=60), nullable=True),
        sa.Column("reported_outcome", sa.String(length=20), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("checkpoint_step", sa.Integer(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_reason", sa.String(length=20), nullable=True),
        sa.Column("billed_seconds", sa.Float(), nullable=False),
        sa.Column("log_bytes", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_attempts_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.UniqueConstraint("client_token", name="uq_attempts_client_token"),
        sa.UniqueConstraint("job_id", "number", name="uq_attempt_job_number"),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_index("ix_attempts_state", "attempts", ["state"])

    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=120), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("zone", sa.String(length=80), nullable=False),
        sa.Column("market", sa.String(length=20), nullable=False),
        sa.Column("instance_type", sa.String(length=80), nullable=False),
        sa.Column("address", sa.String(length=120), nullable=True),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("launched_at", sa.Float(), nullable=False),
        sa.Column("terminated_at", sa.Float(), nullable=True),
        sa.Column("reclaimed", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name="fk_instances_attempt_id_attempts", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_instances"),
    )
    op.create_index("ix_instances_attempt_id", "instances", ["attempt_id"])

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("attempt_id", sa.Integer(), nullable=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_events_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_job_id", "events", ["job_id"])

    op.create_table(
        "controller_lease",
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("url", sa.String(length=200), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_controller_lease"),
    )

    op.create_table(
        "settings",
        sa.Column("key", sa.String(length=80), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_settings"),
    )


def downgrade() -> None:
    # Dropping a table drops its indexes; children before parents for the foreign keys.
    for table in ("settings", "controller_lease", "events", "instances", "attempts", "jobs"):
        op.drop_table(table)
