"""Migration 0023: when the delivery of a job's next notification first failed, beside its cursor."""

from __future__ import annotations

from sqlalchemy import inspect, select, update
from test_state_migrations import migrate

from spotrun.state import Job, Store
from spotrun.state.migrations import current_revision, head_revision


def job_columns(store: Store) -> set[str]:
    return {column["name"] for column in inspect(store.engine).get_columns("jobs")}


def test_the_first_failure_goes_down_and_comes_back_empty_and_the_cursor_is_kept(store: Store) -> None:
    with store.session() as session:
        session.add(Job(name="j", spec={"run": "x"}, state="RUNNING", created_at=1.0, updated_at=1.0,
                        notified_event_id=7))
    with store.session() as session:
        session.execute(update(Job).values(notify_failing_since=100.5))

    migrate(store, "0022", down=True)
    assert "notify_failing_since" not in job_columns(store) and "notified_event_id" in job_columns(store)
    migrate(store, "head")

    assert current_revision(store.engine) == head_revision()
    with store.session() as session:
        assert session.execute(select(Job.notified_event_id, Job.notify_failing_since)).all() == [(7, None)]
