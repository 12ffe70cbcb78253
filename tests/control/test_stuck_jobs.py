"""A job the controller cannot drive (a cloud not set up: no region) says so in its own events, once per cause,
and `spotrun status ID` shows it while it is the newest word on the job; the job goes on once the cause is gone."""

from __future__ import annotations

from spotrun.control.stuck import StuckJobs
from spotrun.server.views import job_detail
from spotrun.state import Event


def stuck_events(world, job_id: int) -> list[str]:
    with world.store.session() as session:
        return [event.message for event in session.query(Event).filter_by(job_id=job_id, kind="stuck")]


def detail_of(world, job_id: int):
    with world.store.session() as session:
        return job_detail(session, world.job(job_id), world.clock.now())


def test_a_job_the_controller_cannot_drive_says_why_once_and_goes_on_when_it_can(world, monkeypatch):
    job_id = world.submit()
    working = world.controller._provider_factory

    def not_set_up(name):
        raise ValueError("no AWS region: set region=, SPOTRUN_AWS_REGION, AWS_REGION or a profile's region")

    monkeypatch.setattr(world.controller, "_provider_factory", not_set_up)
    for _ in range(3):
        world.tick()
    [told] = stuck_events(world, job_id)
    assert "cannot go on with this job (ValueError: no AWS region" in told
    assert detail_of(world, job_id).stuck == told and world.job(job_id).state == "PENDING"

    monkeypatch.setattr(world.controller, "_provider_factory", working)
    world.run_to_running(job_id)
    assert detail_of(world, job_id).stuck is None  # newer events since


def test_a_cause_is_told_once_until_the_job_goes_on(world):
    job_id = world.submit()
    stuck = StuckJobs(world.store, world.clock.now)
    for _ in range(3):
        stuck.failed(job_id, ValueError("no region"))
    stuck.failed(job_id, RuntimeError())
    stuck.went_on(job_id)
    stuck.failed(job_id, RuntimeError())
    assert [message.split("(")[1].split(")")[0] for message in stuck_events(world, job_id)] == [
        "ValueError: no region", "RuntimeError", "RuntimeError"]
