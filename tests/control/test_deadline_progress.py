"""A deadline job whose trainer reports no progress, as the controller sees it: the try it runs on is counted once,
and a job that outruns its estimated_duration is still placed again."""

import pytest

from world import SPEC, alive_for


def deadline_spec(policy: str) -> str:
    spot = f"max_wait: 2h, deadline: 3h, restart_overhead: 1m, policy: {policy}"
    return SPEC.replace("max_wait: 2h", spot) + "estimated_duration: 20m\n"


def events(world, job_id):
    from sqlalchemy import select

    from spotrun.state import Event

    with world.store.session() as session:
        return [(e.kind, e.message) for e in session.scalars(select(Event).where(Event.job_id == job_id))]


@pytest.mark.parametrize("policy", ["default", "uniform_progress", "greedy"])
def test_a_job_preempted_after_outrunning_its_estimate_is_placed_again(world, policy):
    job_id = world.submit(deadline_spec(policy))
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 30 * 60)  # 30 min of a job estimated at 20
    world.cloud.reclaim(instance)
    for _ in range(6):
        world.tick(30)
    attempts = world.attempts(job_id)
    assert len(attempts) >= 2 and attempts[1].created_at > attempts[0].ended_at, events(world, job_id)
    assert not [m for _, m in events(world, job_id) if "work done" in m]


def test_uniform_progress_keeps_a_job_running_past_half_its_estimate(world):
    # the try the job runs on was counted twice (as the history's open try and as the instance held): at half its
    # estimate the job read as done, and uniform progress stopped the instance to wait
    job_id = world.submit(deadline_spec("uniform_progress"))
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 15 * 60)
    assert [a.state for a in world.attempts(job_id)] == ["running"], events(world, job_id)
    assert not [kind for kind, _ in events(world, job_id) if kind == "move_requested"]
