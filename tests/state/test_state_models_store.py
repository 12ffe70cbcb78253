"""Every model survives a round trip through the store; constraints, cascades and event order hold."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, func, inspect, select
from sqlalchemy.exc import IntegrityError

from spotrun.state import Attempt, ControllerLease, Event, Instance, Job, Setting, Store, add_event

NESTED_SPEC = {
    "name": "digits",
    "resources": {"gpus": 1, "zones": ["us-east-1a", "us-east-1b"]},
    "limits": {"max_price": 0.42, "deadline": None, "spot": True},
    "unicode": "entraînement ✓",
}


def a_job(**overrides: Any) -> Job:
    values: dict[str, Any] = dict(name="digits", spec=NESTED_SPEC, state="pending", created_at=100.5, updated_at=100.5)
    return Job(**(values | overrides))


def an_attempt(job: Job, number: int = 1, client_token: str | None = None, **overrides: Any) -> Attempt:
    values: dict[str, Any] = dict(
        job=job,
        number=number,
        state="launching",
        provider="local",
        zone="local-a",
        market="spot",
        instance_type="cpu-small",
        price_per_hour=0.0312,
        on_demand_price_per_hour=0.104,
        client_token=client_token or f"token-{id(job)}-{number}",
        token_hash="ab" * 32,
        created_at=101.25,
    )
    return Attempt(**(values | overrides))


def an_instance(attempt: Attempt, instance_id: str = "i-0001") -> Instance:
    return Instance(
        id=instance_id,
        provider="local",
        attempt_id=attempt.id,
        zone="local-a",
        market="spot",
        instance_type="cpu-small",
        state="running",
        launched_at=102.0,
    )


def column_values(row: object) -> dict[str, Any]:
    return {attr.key: getattr(row, attr.key) for attr in inspect(row).mapper.column_attrs}


def test_every_model_round_trips(store: Store) -> None:
    with store.session() as session:
        job = a_job(finished_at=1_700_000_000.123456, not_before=5.5, cancel_requested=True, failure_reason="x" * 5000)
        attempt = an_attempt(
            job, max_price=0.05, instance_id="i-0001", started_at=1.0, exit_code=-15, checkpoint_step=2**31 - 1,
            end_reason="preempted", billed_seconds=3600.75, log_bytes=123,
        )
        session.add_all([job, attempt])
        session.flush()
        rows: list[object] = [
            job,
            attempt,
            an_instance(attempt),
            Event(job_id=job.id, attempt_id=attempt.id, at=103.0, kind="launched", message="ok", data={"a": [1, 2]}),
            Event(job_id=None, attempt_id=None, at=104.0, kind="note", message="no data", data=None),
            ControllerLease(name="controller", holder="host:1", pid=1, url="http://127.0.0.1:1", expires_at=9.0),
            Setting(key="catalog", value={"prices": [0.1, 0.2], "nested": {"ok": True}}),
            Setting(key="list", value=[1, "two", None]),
            Setting(key="number", value=3.5),
            Setting(key="text", value="plain"),
        ]
        session.add_all(rows)
        session.flush()
        written = [(type(row), inspect(row).identity, column_values(row)) for row in rows]

    with store.session() as session:
        for model, identity, values in written:
            assert column_values(session.get_one(model, identity)) == values


def test_python_side_defaults_fill_unset_columns(store: Store) -> None:
    with store.session() as session:
        job = a_job()
        session.add_all([job, an_attempt(job)])
    with store.session() as session:
        job = session.get_one(Job, job.id)
        assert (job.owner, job.cancel_requested, job.restarts_on_error, job.preemptions, job.capacity_rounds) == (
            "local", False, 0, 0, 0,
        )
        assert (job.attempts[0].billed_seconds, job.attempts[0].log_bytes) == (0.0, 0)


def test_attempt_client_token_is_unique_across_jobs(store: Store) -> None:
    with store.session() as session:
        session.add(an_attempt(a_job(), client_token="same"))
    with pytest.raises(IntegrityError), store.session() as session:
        session.add(an_attempt(a_job(), client_token="same"))


def test_attempt_number_is_unique_within_a_job_only(store: Store) -> None:
    with store.session() as session:
        first, second = a_job(), a_job()
        session.add_all([an_attempt(first, number=1), an_attempt(second, number=1)])
    with pytest.raises(IntegrityError), store.session() as session:
        session.add(an_attempt(session.get_one(Job, first.id), number=1, client_token="another"))


def test_attempts_come_back_ordered_by_number(store: Store) -> None:
    with store.session() as session:
        job = a_job()
        session.add_all([an_attempt(job, number=n) for n in (3, 1, 2)])
    with store.session() as session:
        assert [a.number for a in session.get_one(Job, job.id).attempts] == [1, 2, 3]


@pytest.mark.parametrize("how", ["orm", "sql"])
def test_deleting_a_job_deletes_its_attempts_instances_and_events(store: Store, how: str) -> None:
    with store.session() as session:
        doomed, kept = a_job(name="doomed"), a_job(name="kept")
        for job in (doomed, kept):
            attempt = an_attempt(job)
            session.add(attempt)
            session.flush()
            session.add(an_instance(attempt, instance_id=f"i-{job.name}"))
            add_event(session, at=1.0, kind="created", message=job.name, job_id=job.id, attempt_id=attempt.id)
        add_event(session, at=2.0, kind="note", message="not about a job")

    with store.session() as session:
        if how == "orm":
            session.delete(session.get_one(Job, doomed.id))
        else:  # the database's own ON DELETE CASCADE, with no ORM help
            session.execute(delete(Job).where(Job.id == doomed.id))

    with store.session() as session:
        assert session.scalars(select(Job.name)).all() == ["kept"]
        assert session.scalars(select(Attempt.job_id)).all() == [kept.id]
        assert session.scalars(select(Instance.id)).all() == ["i-kept"]
        assert session.scalars(select(Event.message).order_by(Event.id)).all() == ["kept", "not about a job"]


def test_events_come_back_in_insertion_and_time_order(store: Store) -> None:
    times = [5.0, 1.0, 3.0, 3.0, 2.0, 9.0, 0.5, 3.0]
    with store.session() as session:
        job = a_job()
        session.add(job)
        session.flush()
        for number, at in enumerate(times):
            add_event(session, at=at, kind="tick", message=f"event {number}", job_id=job.id, data={"n": number})
    with store.session() as session:
        by_id = session.scalars(select(Event).order_by(Event.id)).all()
        assert [event.data["n"] for event in by_id] == list(range(len(times)))
        by_time = session.scalars(select(Event).where(Event.job_id == job.id).order_by(Event.at, Event.id)).all()
        assert [(event.at, event.data["n"]) for event in by_time] == sorted((at, n) for n, at in enumerate(times))
        assert session.scalar(select(func.count()).select_from(Event)) == len(times)
