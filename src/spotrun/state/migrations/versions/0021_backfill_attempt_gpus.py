"""Fills `attempts.gpus` (0020) for the GCP attempts made before it, from their job's GPUs: without it, for the two
weeks the market's history looks back, a GPU job's older tries counted as the bare machine's market (a V100 stockout
steering CPU-only jobs on the same N1 machine away from its zone).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28

Frozen at this revision: never import the models or spotrun's GPU names here (the copy below is this revision's).
A job whose spec names a GPU this copy does not know keeps null, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GCE_ACCELERATOR_TYPES = {
    "K80": "nvidia-tesla-k80", "P4": "nvidia-tesla-p4", "P100": "nvidia-tesla-p100", "V100": "nvidia-tesla-v100",
    "T4": "nvidia-tesla-t4", "A100": "nvidia-tesla-a100", "A100-80GB": "nvidia-a100-80gb", "L4": "nvidia-l4",
    "H100": "nvidia-h100-80gb",
}

jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("spec", sa.JSON))
attempts = sa.table("attempts", sa.column("job_id", sa.Integer), sa.column("provider", sa.String),
                    sa.column("gpus", sa.String))


def gpus_text(spec: Any) -> str | None:
    """The GPUs a GCP job's attempts attached, as 0020 records them ("nvidia-tesla-v100x1"); None when the spec
    names none, or one this revision does not know."""
    resources = spec.get("resources") if isinstance(spec, dict) else None
    if not isinstance(resources, dict) or resources.get("cloud") != "gcp":
        return None
    accelerators = resources.get("accelerators")
    if not isinstance(accelerators, dict) or not accelerators:
        return None
    pairs = []
    for name, count in accelerators.items():
        if not isinstance(name, str) or not isinstance(count, int) or isinstance(count, bool):
            return None
        gce = name.lower() if name.lower().startswith("nvidia-") else GCE_ACCELERATOR_TYPES.get(name.upper())
        if gce is None:
            return None
        pairs.append((gce, count))
    return ",".join(f"{gce}x{count}" for gce, count in dict(sorted(pairs)).items())


def upgrade() -> None:
    bind = op.get_bind()
    unfilled = sa.and_(attempts.c.provider == "gcp", attempts.c.gpus.is_(None))
    pending = sa.select(jobs.c.id, jobs.c.spec).where(
        jobs.c.id.in_(sa.select(attempts.c.job_id).where(unfilled).distinct())
    )
    for job_id, spec in bind.execute(pending).all():
        text = gpus_text(spec)
        if text is not None:
            bind.execute(attempts.update().where(attempts.c.job_id == job_id, unfilled).values(gpus=text))


def downgrade() -> None:
    """Nothing to undo: 0020's downgrade drops the column."""
