"""Which of a job's events are notifications, and which of those its `notify.events` asks for (`notifications`)."""

from __future__ import annotations

import pytest

from spotrun.control import records
from spotrun.control.notifications import backlog
from spotrun.control.states import JobState
from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job, Store, add_event

SPOT_JOB = {"run": "x", "notify": {"webhook": "https://h.example.com/s", "events": [
    "succeeded", "failed", "cancelled", "preempted", "fell_back", "back_to_spot"]}}


class Records:
    """A job's attempts and events, written as the controller writes them (`records.transition`)."""

    def __init__(self, store: Store, spec: dict, cursor: int | None = 0) -> None:
        self.store = store
        with store.session() as session:
            job = Job(name="j", spec=spec, state="PENDING", created_at=0.0, updated_at=0.0, notified_event_id=cursor)
            session.add(job)
            session.flush()
            self.job_id = job.id
        self.attempts = 0
        self.last_id: int | None = None

    def state(self, to: str) -> None:
        with self.store.session() as session:
            records.transition(session, session.get(Job, self.job_id), JobState(to), 1.0, "why")

    def launched(self, market: str, *, placed: bool = True, standby: bool = False, nodes: int = 1) -> list[int]:
        """`nodes` attempts on `market` (a gang's), launched; `placed`: each got its instance (an `instance_launched`
        event), else it was refused; `standby`: they stand by for a move while the job runs on. Their ids."""
        ids = []
        with self.store.session() as session:
            for _ in range(nodes):
                self.attempts += 1
                attempt = Attempt(
                    job_id=self.job_id, number=self.attempts, state="running", provider="memory", zone="m-a",
                    market=market, instance_type="t", price_per_hour=1.0, on_demand_price_per_hour=3.0,
                    client_token=f"ct-{self.job_id}-{self.attempts}", token_hash="h", created_at=1.0,
                    started_at=1.0 if placed else None, standby_for=self.last_id if standby else None,
                )
                session.add(attempt)
                session.flush()
                kind = "instance_launched" if placed else "launch_refused"
                add_event(session, at=1.0, kind=kind, job_id=self.job_id, attempt_id=attempt.id,
                          message=f"attempt {self.attempts}: {market}")
                ids.append(attempt.id)
        self.last_id = ids[-1]
        return ids

    def runs_on(self, attempt_ids: list[int]) -> None:
        """The job moves to RUNNING on these attempts (its node's, or its gang's)."""
        with self.store.session() as session:
            job = session.get(Job, self.job_id)
            if job.state != JobState.PROVISIONING:
                records.transition(session, job, JobState.PROVISIONING, 1.0, "placed")
            attempts = [session.get(Attempt, attempt_id) for attempt_id in attempt_ids]
            records.transition(session, job, JobState.RUNNING, 1.0, "agent started", running_on=attempts)

    def launched_and_running(self, market: str, nodes: int = 1) -> None:
        self.runs_on(self.launched(market, nodes=nodes))

    def other(self, kind: str) -> None:
        with self.store.session() as session:
            add_event(session, at=1.0, kind=kind, job_id=self.job_id, message=kind)

    def due(self) -> list[str]:
        with self.store.session() as session:
            job = session.get(Job, self.job_id)
            return [n.name for n in backlog(session, job, JobSpec.stored(job.spec)).notifications]


def test_a_spot_job_s_life_tells_each_happening_once(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    job.launched_and_running("spot")
    job.other("preemption_notice")
    job.state("PREEMPTED")
    job.state("PROVISIONING")
    job.launched("spot", placed=False)  # refused: not a market the job ran on
    job.launched_and_running("on-demand")  # fell back
    job.state("PROVISIONING")
    job.launched_and_running("on-demand")  # a restart after a crash: still on-demand, nothing new
    job.other("move_started")
    standby = job.launched("spot", standby=True)  # a move's standby: told once the job runs on it
    assert job.due() == ["preempted", "fell_back"]
    job.state("PROVISIONING")
    job.other("move_taken_over")
    job.runs_on(standby)  # back to spot
    job.state("SUCCEEDED")
    assert job.due() == ["preempted", "fell_back", "back_to_spot", "succeeded"]


def test_a_standby_given_up_is_no_market_change_and_the_next_attempt_is_compared_with_where_the_job_ran(
    store: Store,
) -> None:
    job = Records(store, SPOT_JOB)
    job.launched_and_running("on-demand")
    job.launched("spot", standby=True)  # a move back to spot, given up: the job runs on on-demand
    job.other("move_abandoned")
    job.state("PROVISIONING")
    job.launched_and_running("on-demand")  # a restart after a crash, on on-demand again
    assert job.due() == ["fell_back"]


def test_a_job_launched_on_demand_that_never_ran_there_did_not_fall_back(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    job.launched_and_running("spot")
    job.state("PREEMPTED")
    job.state("PROVISIONING")
    job.launched("on-demand")  # lost before its agent reported in
    job.state("PROVISIONING")
    job.launched_and_running("spot")
    assert job.due() == ["preempted"]


def test_the_first_run_on_on_demand_is_a_fallback_and_a_gang_s_nodes_one(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    job.launched_and_running("on-demand", nodes=3)  # a gang's three nodes placed by one decision
    assert job.due() == ["fell_back"]


def test_a_gang_with_one_node_on_demand_fell_back_and_is_back_once_every_node_is_on_spot(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    spot_nodes = job.launched("spot", nodes=2)
    job.runs_on(spot_nodes + job.launched("on-demand"))
    job.state("PROVISIONING")
    job.runs_on(spot_nodes + job.launched("spot"))
    assert job.due() == ["fell_back", "back_to_spot"]


def test_an_on_demand_job_never_falls_back(store: Store) -> None:
    job = Records(store, {**SPOT_JOB, "spot": {"use_spot": False}})
    job.launched_and_running("on-demand")
    job.state("FAILED")
    assert job.due() == ["failed"]


def test_a_move_to_running_names_the_attempts_it_runs_on(store: Store) -> None:
    job = Records(store, SPOT_JOB)
    job.state("PROVISIONING")
    with pytest.raises(ValueError, match="running_on names the attempts a move to RUNNING runs on"):
        job.state("RUNNING")


def test_only_the_chosen_happenings_are_due_and_the_cursor_settles_past_the_rest(store: Store) -> None:
    job = Records(store, {"run": "x", "notify": {"webhook": "https://h.example.com/s", "events": ["cancelled"]}})
    job.launched_and_running("spot")
    job.state("PREEMPTED")
    job.state("PROVISIONING")
    job.launched_and_running("on-demand")
    job.state("CANCELLED")
    with store.session() as session:
        row = session.get(Job, job.job_id)
        due = backlog(session, row, JobSpec.stored(row.spec))
    assert [n.name for n in due.notifications] == ["cancelled"]
    assert due.ended and due.settles_to == max(n.event_id for n in due.notifications)


@pytest.mark.parametrize("cursor", [4, 5])
def test_events_up_to_the_cursor_are_not_read_again(store: Store, cursor: int) -> None:
    job = Records(store, SPOT_JOB, cursor=cursor)  # event ids: 1 launched, 2 PROVISIONING, 3 RUNNING, 4 PREEMPTED,
    job.launched_and_running("spot")  # 5 FAILED
    job.state("PREEMPTED")
    job.state("FAILED")
    assert job.due() == (["failed"] if cursor == 4 else [])
