"""Migration 0021 fills `attempts.gpus` for the GCP attempts made before 0020 from their job's GPUs, as the
controller records them now (`placement.market_gpus`), and leaves every other attempt as it was."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from sqlalchemy import MetaData, inspect, select
from test_state_migrations import a_value, migrate

from spotrun.control.placement import market_gpus
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Store

backfill = importlib.import_module("spotrun.state.migrations.versions.0021_backfill_attempt_gpus")

GCP_V100 = {"name": "v", "run": "train", "resources": {"cloud": "gcp", "instance_type": "n1-standard-8",
                                                        "accelerators": {"V100": 1}}}
GCP_MIXED = {"name": "m", "run": "train", "resources": {"cloud": "gcp", "instance_type": "n1-standard-8",
                                                         "accelerators": {"t4": 2, "nvidia-L4": 1}}}
GCP_CPU = {"name": "c", "run": "train", "resources": {"cloud": "gcp", "instance_type": "n1-standard-8"}}
AWS_GPU = {"name": "a", "run": "train", "resources": {"cloud": "aws", "accelerators": {"V100": 1}}}


@pytest.mark.parametrize("spec", [GCP_V100, GCP_MIXED, GCP_CPU, AWS_GPU])
def test_the_frozen_rule_writes_what_the_controller_records(spec: dict) -> None:
    assert backfill.gpus_text(spec) == market_gpus(JobSpec.model_validate(spec))


@pytest.mark.parametrize("spec", [
    {"row": 1}, None, "text", {"resources": {"cloud": "gcp", "accelerators": {"X9000": 1}}},
    {"resources": {"cloud": "gcp", "accelerators": {"V100": True}}}, {"resources": {"cloud": "gcp", "accelerators": []}},
])
def test_a_spec_it_cannot_read_leaves_null(spec: Any) -> None:
    assert backfill.gpus_text(spec) is None


def insert(store: Store, table: str, row: int, **values: Any) -> None:
    tables = MetaData()
    tables.reflect(store.engine, only=[table])
    columns = inspect(store.engine).get_columns(table)
    with store.engine.begin() as connection:
        connection.execute(tables.tables[table].insert(), {
            **{c["name"]: a_value(table, c, row) for c in columns}, "id": row, **values,
        })


def test_the_upgrade_fills_the_gcp_attempts_of_gpu_jobs_only(store: Store) -> None:
    migrate(store, "0020", down=True)
    jobs = {1: GCP_V100, 2: GCP_CPU, 3: AWS_GPU, 4: {"row": 4}}
    for job_id, spec in jobs.items():
        insert(store, "jobs", job_id, spec=spec)
    rows = {  # attempt id: (job, provider, gpus before)
        1: (1, "gcp", None), 2: (1, "gcp", None), 3: (1, "gcp", "nvidia-tesla-t4x1"),  # recorded after 0020: kept
        4: (2, "gcp", None), 5: (3, "aws", None), 6: (4, "gcp", None),
    }
    for attempt_id, (job_id, provider, gpus) in rows.items():
        insert(store, "attempts", attempt_id, job_id=job_id, number=attempt_id, provider=provider, gpus=gpus,
               client_token=f"ct-{attempt_id}")

    migrate(store, "head")

    with store.session() as session:
        filled = dict(session.execute(select(Attempt.id, Attempt.gpus)).all())
    assert filled == {1: "nvidia-tesla-v100x1", 2: "nvidia-tesla-v100x1", 3: "nvidia-tesla-t4x1",
                      4: None, 5: None, 6: None}
