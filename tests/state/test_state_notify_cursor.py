"""Migration 0022: the cursor of a job's notifications, and the partial index of the jobs that have some to settle."""

from __future__ import annotations

from sqlalchemy import inspect, select, update
from test_state_migrations import migrate

from spotrun.state import Job, Store
from spotrun.state.migrations import current_revision, head_revision


def job_columns(store: Store) -> set[str]:
    return {column["name"] for column in inspect(store.engine).get_columns("jobs")}


def notifying_index_where(store: Store) -> str | None:
    indexes = {ix["name"]: ix for ix in inspect(store.engine).get_indexes("jobs")}
    if "ix_jobs_notifying" not in indexes:
        return None
    where = indexes["ix_jobs_notifying"].get("dialect_options", {}).get(f"{store.engine.dialect.name}_where")
    return str(where).strip("()").lower()


def add_job(store: Store, name: str) -> None:
    with store.session() as session:
        session.add(Job(name=name, spec={"run": "x"}, state="RUNNING", created_at=1.0, updated_at=1.0))


def test_the_cursor_goes_down_and_comes_back_empty_and_every_job_is_kept(store: Store) -> None:
    add_job(store, "before")
    with store.session() as session:
        session.execute(update(Job).values(notified_event_id=7))
    assert notifying_index_where(store) == "notified_event_id is not null", "ix_jobs_notifying is not partial"

    migrate(store, "0021", down=True)
    assert "notified_event_id" not in job_columns(store) and notifying_index_where(store) is None
    migrate(store, "head")

    assert current_revision(store.engine) == head_revision()
    assert notifying_index_where(store) == "notified_event_id is not null"
    with store.session() as session:
        assert session.execute(select(Job.name, Job.notified_event_id)).all() == [("before", None)]
