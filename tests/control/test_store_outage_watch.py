"""A store outage longer than the heartbeat timeout: the agents' heartbeats could not be recorded meanwhile (the
agent API writes them to the same store), so once the store answers again the controller gives them their timeout
before it takes any attempt for lost. Before, the first tick after a database restart of a minute took every running
attempt for lost, terminated its instance and placed the job again."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

HEARTBEAT_TIMEOUT = 30.0


class DatabaseAway(Exception):
    """What the driver raises while the database restarts."""


@contextmanager
def store_away(world, monkeypatch: pytest.MonkeyPatch):
    """Every session of the controller's store fails, as while the database restarts."""

    def failing_session():
        raise OperationalError("SELECT 1", {}, DatabaseAway("server closed the connection unexpectedly"))

    with monkeypatch.context() as patched:
        patched.setattr(world.controller.store, "session", failing_session)
        yield


def test_no_attempt_is_lost_for_heartbeats_the_store_could_not_record(world, monkeypatch):
    world.controller = world.new_controller(heartbeat_timeout=HEARTBEAT_TIMEOUT)
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    beat = world.agent(instance)
    beat("heartbeat", {})
    with store_away(world, monkeypatch):
        for _ in range(3):  # a minute away: each tick fails, as the daemon's loop sees it
            world.clock.advance(20)
            with pytest.raises(OperationalError):
                world.controller.tick()
    world.tick()
    [attempt] = world.attempts(job_id)
    assert attempt.state == "running" and attempt.ended_at is None, attempt.end_reason
    beat("heartbeat", {})  # heard again once the store answers
    world.tick(HEARTBEAT_TIMEOUT - 1)
    assert world.attempts(job_id)[0].ended_at is None


def test_an_agent_silent_after_the_outage_is_still_taken_for_lost(world, monkeypatch):
    world.controller = world.new_controller(heartbeat_timeout=HEARTBEAT_TIMEOUT)
    job_id = world.submit()
    world.run_to_running(job_id)
    with store_away(world, monkeypatch):
        world.clock.advance(60)
        with pytest.raises(OperationalError):
            world.controller.tick()
    world.tick()
    assert world.attempts(job_id)[0].ended_at is None
    world.tick(HEARTBEAT_TIMEOUT + 1)  # no heartbeat since the store came back: the instance is gone
    assert world.attempts(job_id)[0].end_reason == "lost"


def test_an_outage_met_by_one_job_restarts_the_watch_for_those_driven_after_it(world, monkeypatch):
    """The store fails one job's drive and answers the next one's, in the same tick: that one is judged from the
    outage on, not from before it."""
    world.controller = world.new_controller(heartbeat_timeout=HEARTBEAT_TIMEOUT)
    first, second = world.submit(), world.submit()
    world.run_to_running(first)
    world.run_to_running(second)
    drive = world.controller.drive

    def first_meets_the_outage(job_id: int) -> None:
        if job_id == first:
            raise OperationalError("SELECT 1", {}, DatabaseAway("server closed the connection unexpectedly"))
        drive(job_id)

    monkeypatch.setattr(world.controller, "drive", first_meets_the_outage)
    world.tick(HEARTBEAT_TIMEOUT + 30)  # the store was away this long, then failed the first drive only
    assert world.attempts(second)[0].ended_at is None


@pytest.mark.parametrize(("report", "body"), [("heartbeat", {}), ("exit", {"outcome": "succeeded", "exit_code": 0})])
def test_a_report_received_while_the_store_could_not_record_it_still_counts(
    impatient_sqlite, tmp_path, monkeypatch, report, body,
):
    """SQLite locked by a stalled writer: the controller's reads go on and see the old heartbeat while the agent's
    reports (its heartbeats, or its exit once the command is done) wait for the lock and fail. The agent API noted
    them as received (`control.heard`): no attempt is lost."""
    from fastapi.testclient import TestClient
    from world import World

    from spotrun.server.agent_api import create_agent_app

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    world = World(impatient_sqlite.store, tmp_path)
    world.controller = world.new_controller(heartbeat_timeout=HEARTBEAT_TIMEOUT)
    world.api = TestClient(create_agent_app(world.store, world.clock, world.controller.heard))
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    [attempt] = world.attempts(job_id)
    token = {"Authorization": f"Bearer {agent_token(world, instance)}"}
    with impatient_sqlite.write_lock_held():
        world.clock.advance(HEARTBEAT_TIMEOUT + 10)
        refused = world.api.post(f"/agent/v1/attempts/{attempt.id}/{report}", json=body, headers=token)
        assert refused.status_code == 503
    world.tick()
    assert world.attempts(job_id)[0].ended_at is None, f"taken for lost though its {report} came"
    world.tick(HEARTBEAT_TIMEOUT + 1)  # silent since (the exit's retries lost too): the instance is gone
    assert world.attempts(job_id)[0].end_reason == "lost"


def agent_token(world, instance: str) -> str:
    import json

    return json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])["token"]


def test_a_heartbeat_waits_for_sqlites_lock_only_briefly_and_the_connection_gets_its_patience_back(tmp_path):
    """A heartbeat that waited out a stalled writer's lock (30 s) held a server thread, and enough of them held every
    thread: then no report was heard at all. Its session waits HEARTBEAT_PATIENCE; the pooled connection is given
    the store's own busy timeout back when the pool takes it back. (SQLite's: PostgreSQL waits on rows.)"""
    from spotrun.server.agent_api import HEARTBEAT_PATIENCE
    from spotrun.state import Store
    from spotrun.state.store import SQLITE_BUSY_SECONDS

    store = Store(f"sqlite:///{tmp_path / 'patience.db'}")
    with store.session(patience=HEARTBEAT_PATIENCE) as session:
        assert session.execute(text("PRAGMA busy_timeout")).scalar() == HEARTBEAT_PATIENCE * 1000
    with store.session() as session:
        assert session.execute(text("PRAGMA busy_timeout")).scalar() == SQLITE_BUSY_SECONDS * 1000
    store.dispose()
