"""Which of a job's events are notifications, and which of those its `notify.events` asks for (`notifications`)."""

from __future__ import annotations

import pytest

from spotrun.control.notifications import backlog
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job, Store, add_event

SPOT_JOB = {"run": "x", "notify": {"webhook": "https://h.example.com/s", "events": [
    "succeeded", "failed", "cancelled", "preempted", "fell_back", "back_to_spot"]}}


class Records:
    """A job's attempts and events, written as the controller writes them."""

    def __init__(self, store: Store, spec: dict, cursor: int | None = 0) -> None:
        self.store = store
        with store.session() as session:
            job = Job(name="j", spec=spec, state="RUNNING", created_at=0.0, updated_at=0.0, notified_event_id=cursor)
            session.add(job)
            session.flush()
            self.job_id = job.id
        self.attempts = 0

    def state(self, previous: str, to: str) -> None:
        with self.store.session() as session:
            add_event(session, at=1.0, kind="state", job_id=self.job_id, message=f"{previous} → {to}: why",
                      data={"from": previous, "to": to})
            session.get(Job, self.job_id).state = to

    def launched(self, market: str, *, placed: bool = True) -> None:
        """An attempt on `market`; `placed`: it got its instance (an `instance_launched` event), else it was refused."""
        self.attempts += 1
        with self.store.session() as session:
            attempt = Attempt(
                job_id=self.job_id, number=self.attempts, state="running", provider="memory", zone="m-a", market=market,
                instance_type="t", price_per_hour=1.0, on_demand_price_per_hour=3.0,
                client_token=f"ct-{self.job_id}-{self.attempts}", token_hash="h", created_at=1.0,
                started_at=1.0 if placed else None,
            )
            session.add(attempt)
            session.flush()
            kind = "instance_launched" if placed else "launch_refused"
            add_event(session, at=1.0, kind=kind, job_id=self.job_id, attempt_id=attempt.id,
                      message=f"attempt {self.attempts}: {market}")

    def other(self, kind: str) -> None:
        with self.store.session() as session:
            add_event(session, at=1.0, kind=kind, job_id=self.job_id, message=kind)

    def due(self) -> list[str]:
        with self.store.session() as session:
            job = session.get(Job, self.job_id)
            return [n.name for n in backlog(session, job, JobSpec.stored(job.spec)).notifications]


def test_a_spot_job_s_life_tells_each_happening_once(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    job.launched("spot")
    job.state("PROVISIONING", "RUNNING")
    job.other("preemption_notice")
    job.state("RUNNING", "PREEMPTED")
    job.launched("spot", placed=False)  # refused: not a market the job ran on
    job.launched("on-demand")  # fell back
    job.launched("on-demand")  # a restart after a crash: still on-demand, nothing new
    job.other("move_started")
    job.launched("spot")  # back to spot (a move's standby)
    job.state("RUNNING", "SUCCEEDED")
    assert job.due() == ["preempted", "fell_back", "back_to_spot", "succeeded"]


def test_the_first_placement_on_on_demand_is_a_fallback_and_a_gang_s_nodes_one(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    for _ in range(3):  # a gang's three nodes placed by one decision
        job.launched("on-demand")
    assert job.due() == ["fell_back"]


def test_an_on_demand_job_never_falls_back(store: Store) -> None:
    job = Records(store, {**SPOT_JOB, "spot": {"use_spot": False}})
    job.launched("on-demand")
    job.state("RUNNING", "FAILED")
    assert job.due() == ["failed"]


def test_only_the_chosen_happenings_are_due_and_the_cursor_settles_past_the_rest(store: Store) -> None:
    job = Records(store, {"run": "x", "notify": {"webhook": "https://h.example.com/s", "events": ["cancelled"]}})
    job.launched("spot")
    job.state("RUNNING", "PREEMPTED")
    job.launched("on-demand")
    job.state("RUNNING", "CANCELLED")
    with store.session() as session:
        row = session.get(Job, job.job_id)
        due = backlog(session, row, JobSpec.stored(row.spec))
    assert [n.name for n in due.notifications] == ["cancelled"]
    assert due.ended and due.settles_to == max(n.event_id for n in due.notifications)


@pytest.mark.parametrize("cursor", [2, 3])
def test_events_up_to_the_cursor_are_not_read_again(store: Store, cursor: int) -> None:
    job = Records(store, SPOT_JOB, cursor=cursor)  # event ids: 1 launched, 2 PREEMPTED, 3 FAILED
    job.launched("spot")
    job.state("RUNNING", "PREEMPTED")
    job.state("PREEMPTED", "FAILED")
    assert job.due() == (["failed"] if cursor == 2 else [])
