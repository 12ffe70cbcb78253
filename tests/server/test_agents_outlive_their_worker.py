"""A controller worker that dies does not take its jobs' runs with it: their agents go on reporting to another
worker of the same store (`state.workers`), which takes the jobs over. Real processes: the `spotrun controller` that
`spotrun launch` started, which launched the job's instance and is SIGKILLed while it runs, and a `spotrun server`
started beside it once the job runs (its agent learns of the server from the answers to its heartbeats)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Spotrun, TeamServer
from sqlalchemy import select

from spotrun.server.agent_api import WORKERS_KEPT_SECONDS
from spotrun.state import Attempt, Event
from spotrun.state.models import ControllerWorker

# Long enough to outlast the heartbeat timeout after the kill: an agent left reporting to the dead worker is taken
# for lost, and the job placed again.
JOB = """
name: outlives
run: "sleep 25"
resources: {cloud: local, instance_type: local.cpu}
"""
HEARTBEAT_TIMEOUT = 6


@pytest.fixture
def spotrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spotrun]:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    world = Spotrun(tmp_path / "home")
    world.env["SPOTRUN_HEARTBEAT_TIMEOUT"] = str(HEARTBEAT_TIMEOUT)
    yield world
    world.shutdown()


def test_a_job_goes_on_with_another_worker_when_the_one_that_launched_it_dies(spotrun: Spotrun, tmp_path: Path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text(JOB)
    spotrun.run("launch", str(job_file))  # starts the controller, which launches the instance, its agent told of it
    spotrun.wait_for(1, lambda row: row["state"] == "RUNNING", what="the job to run")
    server = TeamServer(spotrun)
    try:
        wait_for_workers(spotrun, 2)
        # a heartbeat answered once the controller's list of workers (kept WORKERS_KEPT_SECONDS) has the server's
        wait_for_a_heartbeat_after(spotrun, time.time() + WORKERS_KEPT_SECONDS + 0.5)
        spotrun.kill_controller()

        row = spotrun.wait_for(1, lambda row: row["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=120,
                               what="the job's end")
    finally:
        server.stop()
    attempts = spotrun.rows(Attempt, Attempt.number)
    events = [event.message for event in spotrun.rows(Event, Event.id)]
    assert (row["state"], [a.end_reason for a in attempts]) == ("SUCCEEDED", ["succeeded"]), events
    assert not any("no heartbeat" in message for message in events), events


def wait_for_workers(spotrun: Spotrun, count: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with spotrun.reads().session() as session:
            if len(session.scalars(select(ControllerWorker.worker).where(ControllerWorker.expires_at > time.time())).all()) >= count:
                return
        time.sleep(0.2)
    raise AssertionError(f"{count} controller workers did not announce themselves within {timeout} s")


def wait_for_a_heartbeat_after(spotrun: Spotrun, moment: float, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with spotrun.reads().session() as session:
            heard = session.scalar(select(Attempt.last_heartbeat_at).where(Attempt.job_id == 1, Attempt.number == 1))
        if heard is not None and heard > moment:
            return
        time.sleep(0.2)
    raise AssertionError(f"no heartbeat of the job's agent after {moment} within {timeout} s")
