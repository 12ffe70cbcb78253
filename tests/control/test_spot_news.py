"""Spot seen in a market wakes the jobs waiting there for it: a job that gets spot ends the waits of the jobs its
instance could have been, and only theirs, instead of leaving them to find out when their waits are over."""

from __future__ import annotations

import pytest

from spotrun.control.spot_news import wake_jobs_waiting_for_spot
from spotrun.control.states import JobState
from spotrun.providers import QuotaExceeded
from spotrun.state import Attempt, Event, Job

# tests/control is on sys.path via conftest
from world import SPEC, prices  # noqa: E402

WAITING = SPEC.replace("max_wait: 2h", "max_wait: 30d, fallback: wait")
TICK = 10.0


def events(world, job_id: int, kind: str) -> list[Event]:
    with world.store.session() as session:
        return list(session.query(Event).filter(Event.job_id == job_id, Event.kind == kind).order_by(Event.id))


def wait_long(world, job_ids: list[int]) -> None:
    """Tick until every job waits for spot with at least a minute of its wait left."""
    for _ in range(200):
        if all(world.job(i).state == JobState.WAITING and world.job(i).not_before - world.clock.now() > 60 for i in job_ids):
            return
        world.tick(TICK)
    raise AssertionError("the jobs never settled into long waits")


def test_a_job_that_gets_spot_wakes_the_jobs_waiting_for_it_and_they_get_it_at_once(world):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    waiting = [world.submit(WAITING), world.submit(WAITING)]
    wait_long(world, waiting)
    assert all(world.job(i).waits_for_spot for i in waiting)
    world.cloud.capacity["m-b"] = True

    newcomer = world.submit(WAITING)
    for _ in range(3):  # a zone a tick, in the order of its news
        world.tick(TICK)
    assert world.attempts(newcomer)[-1].instance_id is not None, "the new job did not get the spot back"
    started = world.attempts(newcomer)[-1].started_at
    assert all(world.job(i).not_before <= started for i in waiting)
    for job_id in waiting:
        [woken] = events(world, job_id, "woken")
        assert f"spot started in m-b for job {newcomer}" in woken.message
    world.tick(TICK)
    for job_id in waiting:
        last = world.attempts(job_id)[-1]
        assert (last.zone, last.market, last.end_reason) == ("m-b", "spot", None) and last.instance_id is not None


def test_a_job_backing_off_after_a_quota_error_is_not_woken(world, monkeypatch):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    stuck = world.submit(WAITING)
    wait_long(world, [stuck])  # first it waits for spot
    assert world.job(stuck).waits_for_spot
    launch = world.cloud.launch

    def over_quota(request):
        raise QuotaExceeded("vCPU quota of the region reached")

    monkeypatch.setattr(world.cloud, "launch", over_quota)
    while not any("quota" in e.message for e in events(world, stuck, "launch_refused")):
        world.tick(TICK)
    job = world.job(stuck)
    assert job.state == JobState.WAITING and not job.waits_for_spot and job.not_before > world.clock.now()
    monkeypatch.setattr(world.cloud, "launch", launch)

    world.cloud.capacity["m-a"] = True
    world.submit(WAITING)
    world.tick(1.0)
    assert events(world, stuck, "woken") == []
    assert world.job(stuck).not_before == job.not_before


def waiting_job(world, text: str, until: float, *, for_spot: bool = True) -> int:
    job_id = world.submit(text)
    with world.store.session() as session:
        job = session.get(Job, job_id)
        job.state, job.not_before, job.waits_for_spot = JobState.WAITING.value, until, for_spot
    return job_id


def spot_started(job_id: int, zone: str = "m-a", price: float = 1.0, instance_type: str = "local.cpu") -> Attempt:
    return Attempt(job_id=job_id, provider="local", zone=zone, market="spot", instance_type=instance_type,
                   price_per_hour=price)


@pytest.mark.parametrize(
    ("spec", "woken"),
    [
        (WAITING, True),
        (WAITING.replace("zones: [m-a, m-b, m-c]", "zones: [m-b, m-c]"), False),  # not among its zones
        (WAITING.replace("instance_type: local.cpu", "instance_type: local.gpu"), False),  # another market
        (WAITING.replace("fallback: wait", "fallback: wait, max_price: 0.5"), False),  # the spot costs more than its cap
        (WAITING.replace("fallback: wait", "fallback: wait, max_price: 1.0"), True),  # exactly its cap
    ],
    ids=["same-market", "zone-not-its", "other-instance-type", "over-its-max-price", "at-its-max-price"],
)
def test_only_jobs_the_started_instance_could_have_been_are_woken(world, spec, woken):
    now = world.clock.now()
    job_id = waiting_job(world, spec, until=now + 300)
    with world.store.session() as session:
        assert wake_jobs_waiting_for_spot(session, spot_started(job_id + 1000), now, prices) == ([job_id] if woken else [])
    assert world.job(job_id).not_before == (now if woken else now + 300)


def test_jobs_not_waiting_for_spot_or_whose_wait_is_over_are_left_alone(world):
    now = world.clock.now()
    backing_off = waiting_job(world, WAITING, until=now + 300, for_spot=False)
    wait_over = waiting_job(world, WAITING, until=now - 5)
    itself = waiting_job(world, WAITING, until=now + 300)
    ended = waiting_job(world, WAITING, until=now + 300)
    with world.store.session() as session:
        session.get(Job, ended).state = JobState.CANCELLED.value
    with world.store.session() as session:
        assert wake_jobs_waiting_for_spot(session, spot_started(itself), now, prices) == []
    assert [world.job(i).not_before for i in (backing_off, wait_over, itself, ended)] == [now + 300, now - 5, now + 300, now + 300]


def test_a_gang_waiting_for_spot_is_woken_too_and_places_its_nodes(world):
    from gang_world import GANG

    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    gang = world.submit(GANG.replace("preemptions_before_fallback: 3}", "preemptions_before_fallback: 3, fallback: wait}"))
    wait_long(world, [gang])
    assert world.job(gang).waits_for_spot
    world.cloud.capacity["m-c"] = True
    single = world.submit(WAITING)
    for _ in range(3):
        world.tick(TICK)
    assert world.attempts(single)[-1].instance_id is not None
    assert len(events(world, gang, "woken")) == 1
    world.tick(TICK)
    launched = [a for a in world.attempts(gang) if a.instance_id is not None]
    assert sorted(a.node_rank for a in launched) == [0, 1, 2] and {a.zone for a in launched} == {"m-c"}
