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


def progress_now(world, job_id, spec_text):
    from spotrun.control.placement import placement_context
    from spotrun.spec import parse_spec
    from spotrun.state import Job

    with world.store.session() as session:
        job = session.get(Job, job_id)
        return placement_context(session, job, parse_spec(spec_text), ["m-a"], world.clock.now()).progress


def test_steps_reported_without_a_total_count_at_the_measured_rate(world):
    # a trainer that reports its checkpoints' steps but not the run's total: once its step rate is known, the work
    # done is its newest checkpoint's steps at that rate, so work lost since that checkpoint is not counted
    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)
    assert progress_now(world, job_id, spec_text) is None  # counted from the run time
    for step in (0, 100, 200, 300, 400):  # 0.5 steps/s, each report 200 s after the one before
        world.agent(instance)("heartbeat", {"checkpoint_step": step})
        alive_for(world, instance, 200)
    assert progress_now(world, job_id, spec_text) == pytest.approx(400 / 0.5)
    world.cloud.reclaim(instance)  # 200 s after the last report: that work is lost, and not counted
    world.tick()
    assert progress_now(world, job_id, spec_text) == pytest.approx(800)


def test_the_checkpoint_an_attempt_restored_is_not_its_first(world):
    # the agent reports the newest checkpoint it has from its start: the restored one, while the trainer is still
    # restoring it. Counted as the attempt's first, the boot and restore read as training time (a rate too low, which
    # made steps without a total read as more work than done) and as no restart overhead
    from spotrun.control.progress import restart_overhead, step_rate

    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    first = world.run_to_running(job_id)
    for step in (60, 160, 260, 360):  # 1 step/s
        world.agent(first)("heartbeat", {"checkpoint_step": step})
        alive_for(world, first, 100)
    world.cloud.reclaim(first)
    world.tick()
    world.tick()
    second = world.attempts(job_id)[-1]
    world.agent(second.instance_id)("started", {"address": "127.0.0.1"})
    for _ in range(5):  # 300 s of boot and restore, the restored step 360 reported all along
        world.agent(second.instance_id)("heartbeat", {"checkpoint_step": 360})
        alive_for(world, second.instance_id, 60)
    trained_from = world.clock.now()
    for step in (460, 560, 660):
        alive_for(world, second.instance_id, 100)
        world.agent(second.instance_id)("heartbeat", {"checkpoint_step": step})
    attempts = world.job(job_id).placed_attempts
    assert step_rate(attempts) == pytest.approx(1.0, rel=0.02)
    assert restart_overhead(attempts) == pytest.approx(trained_from - second.created_at, abs=25)
    assert progress_now(world, job_id, spec_text) == pytest.approx(660, rel=0.02)
