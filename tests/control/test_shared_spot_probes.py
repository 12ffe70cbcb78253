"""Jobs waiting for spot in one market share what their tries found: a zone another job was just refused in is not
asked again before the asking job's own wait is over. So the cloud is asked, and the store keeps tries, about as
often as for one waiting job, however many wait, and spot's return is still found within about two waits."""

from __future__ import annotations

from collections import defaultdict

import pytest
from sqlalchemy import select

from spotrun.state import Attempt

# tests/control is on sys.path via conftest
from world import SPEC  # noqa: E402

WAITING = SPEC.replace("max_wait: 2h", "max_wait: 30d, fallback: wait")
TICK, MEASURED = 30.0, 1800.0


def spot_tries(world) -> list[tuple[str, float, str | None]]:
    with world.store.session() as session:
        rows = session.execute(select(Attempt.zone, Attempt.created_at, Attempt.end_reason).order_by(Attempt.created_at))
        return [tuple(row) for row in rows]


def run_for(world, seconds: float) -> None:
    for _ in range(int(seconds / TICK)):
        world.tick(TICK)


@pytest.mark.parametrize("jobs", [1, 5])
def test_jobs_waiting_in_one_market_ask_each_zone_about_once_per_wait_and_still_find_spot_back(world, jobs):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    job_ids = []
    for _ in range(jobs):  # submitted a little apart, as jobs are
        job_ids.append(world.submit(WAITING))
        world.tick(7.0)
    wait = world.controller.settings.backoff_max
    run_for(world, 900.0)  # the waits grow to their cap (5, 10, ... 300 s)
    since = world.clock.now()
    run_for(world, MEASURED)
    last_hour = [(zone, at) for zone, at, reason in spot_tries(world) if at >= since]
    assert all(reason == "no_capacity" for _, _, reason in spot_tries(world))
    per_zone = defaultdict(list)
    for zone, at in last_hour:
        per_zone[zone].append(at)
    one_job = MEASURED / wait  # tries a zone gets from a single waiting job
    assert set(per_zone) == set(world.cloud.capacity)
    for zone, times in per_zone.items():
        assert one_job - 1 <= len(times) <= 2 * one_job, f"{zone}: {len(times)} tries in {MEASURED:.0f} s, {jobs} jobs"
        gaps = [b - a for a, b in zip([since, *times], [*times, world.clock.now()])]
        assert max(gaps) <= 2 * wait + 2 * TICK, f"{zone} went unasked for {max(gaps):.0f} s"

    back = next(iter(world.cloud.capacity))
    world.cloud.capacity[back] = True
    returned = world.clock.now()
    while not any(a.started_at for job_id in job_ids for a in world.attempts(job_id)):
        assert world.clock.now() - returned <= 2 * wait + 2 * TICK, "nobody found spot back"
        world.tick(TICK)
