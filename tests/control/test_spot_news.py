"""Spot seen in a market wakes the jobs waiting there for it: a job that gets spot, or whose spot instance ends
without being taken back, ends the waits of the jobs its instance could have been, and only theirs, instead of
leaving them to find out when their waits are over."""

from __future__ import annotations

import pytest

from spotrun.control.spot_news import spot_ended, spot_started, wake_jobs_waiting_for_spot
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


def wait_long(world, job_ids: list[int], beating: str | None = None) -> None:
    """Tick until every job waits for spot with more than three ticks of its wait left (the agent of the instance
    `beating`, if any, beating meanwhile)."""
    for _ in range(200):
        if beating is not None:
            world.agent(beating)("heartbeat", {})
        if all(world.job(i).state == JobState.WAITING and world.job(i).not_before - world.clock.now() > 3 * TICK for i in job_ids):
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


def spot_attempt(job_id: int, **fields) -> Attempt:
    return Attempt(**{"job_id": job_id, "provider": "local", "zone": "m-a", "market": "spot",
                      "instance_type": "local.cpu", "price_per_hour": 1.0, **fields})


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
        found = wake_jobs_waiting_for_spot(session, spot_attempt(job_id + 1000), now, "news", 2, prices)
    assert found == ([job_id] if woken else [])
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
        assert wake_jobs_waiting_for_spot(session, spot_attempt(itself), now, "news", 2, prices) == []
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


def test_a_spot_instance_that_ends_without_being_taken_back_wakes_the_jobs_waiting_for_its_capacity(world):
    first = world.submit(WAITING)
    instance = world.run_to_running(first)
    zone = world.attempts(first)[-1].zone
    for each in world.cloud.capacity:  # the market is full: the next job waits
        world.cloud.capacity[each] = False
    waiting = world.submit(WAITING)
    wait_long(world, [waiting], beating=instance)
    world.agent(instance)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.cloud.capacity[zone] = True  # the instance's capacity is free again
    world.tick(1.0)
    assert world.job(first).state == JobState.SUCCEEDED
    [woken] = events(world, waiting, "woken")
    assert f"job {first}'s spot instance in {zone} ended (succeeded)" in woken.message
    world.tick(1.0)
    assert world.attempts(waiting)[-1].zone == zone and world.attempts(waiting)[-1].instance_id is not None


@pytest.mark.parametrize(
    ("end", "reclaimed", "woken"),
    [("succeeded", False, True), ("cancelled", False, True), ("migrated", False, True), ("released", False, True),
     ("preempted", False, False), ("lost", False, False), ("failed", True, False)],
)
def test_only_an_instance_not_taken_back_frees_its_capacity(world, end, reclaimed, woken):
    now = world.clock.now()
    job_id = waiting_job(world, WAITING, until=now + 300)
    ended = spot_attempt(job_id + 1000, started_at=now - 600, end_reason=end)
    with world.store.session() as session:
        assert spot_ended(session, ended, reclaimed, now, prices) == ([job_id] if woken else [])
        never_ran = spot_attempt(job_id + 1000, started_at=None, end_reason="no_capacity")
        assert spot_ended(session, never_ran, False, now, prices) == []


def test_news_wakes_the_earliest_submitted_jobs_a_few_at_a_time(world):
    now = world.clock.now()
    waiting = []
    for _ in range(4):
        world.clock.advance(60)
        waiting.append(waiting_job(world, WAITING, until=now + 3600))
    now = world.clock.now()
    with world.store.session() as session:
        assert spot_started(session, spot_attempt(9999), now, prices) == waiting[:2]
        assert spot_ended(session, spot_attempt(9999, started_at=now - 60, end_reason="succeeded"), False, now, prices) == [
            waiting[2]
        ]


def test_a_zone_with_room_for_one_more_costs_a_few_refused_tries_not_one_per_waiting_job(world, monkeypatch):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    waiting = [world.submit(WAITING) for _ in range(6)]
    wait_long(world, waiting)
    room = {"m-b": 2}  # the newcomer's instance and one more
    launch = world.cloud.launch

    def launch_while_room(request):
        info = launch(request)
        if request.market == "spot" and request.zone in room:
            room[request.zone] -= 1
            world.cloud.capacity[request.zone] = room[request.zone] > 0
        return info

    monkeypatch.setattr(world.cloud, "launch", launch_while_room)
    world.cloud.capacity["m-b"] = True
    returned = world.clock.now()
    newcomer = world.submit(WAITING)
    for _ in range(5):
        world.tick(TICK)
    got = [i for i in waiting if any(a.instance_id for a in world.attempts(i))]
    assert len(got) == 1 and world.attempts(newcomer)[-1].instance_id is not None
    refused_since = [a for i in waiting for a in world.attempts(i) if a.created_at > returned and a.instance_id is None]
    assert 1 <= len(refused_since) <= 3, f"{len(refused_since)} refused tries for one instance's room"
    assert sum(bool(events(world, i, "woken")) for i in waiting) <= 4


@pytest.mark.parametrize(("news_zone", "woken"), [("m-a", True), ("m-b", False)])
def test_a_gang_waiting_to_replace_lost_nodes_is_woken_only_by_news_of_its_survivors_zone(world, news_zone, woken):
    from gang_world import GANG

    now = world.clock.now()
    gang = waiting_job(world, GANG.replace("preemptions_before_fallback: 3}", "preemptions_before_fallback: 3, fallback: wait}"),
                       until=now + 300)
    with world.store.session() as session:  # node 0 survives in m-a; nodes 1 and 2 were lost
        session.add(Attempt(job_id=gang, number=1, state="running", provider="local", zone="m-a", market="spot",
                            instance_type="local.cpu", price_per_hour=1.0, on_demand_price_per_hour=3.0, client_token="t-1", token_hash="h",
                            instance_id="mi-survivor", created_at=now - 600, started_at=now - 600, node_rank=0))
    with world.store.session() as session:
        found = spot_started(session, spot_attempt(gang + 1000, zone=news_zone), now, prices)
    assert found == ([gang] if woken else [])
