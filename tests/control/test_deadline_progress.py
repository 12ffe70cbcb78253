"""A deadline job whose trainer reports no progress, as the controller sees it: the try it runs on is counted once,
and a job that outruns its estimated_duration is still placed again."""

import pytest

from spotrun.control.placement import UNREPORTED_SAVE_INTERVAL as SAVES
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


def context_now(world, job_id, spec_text):
    """What the job's policy sees now, placing it in zone m-a."""
    from spotrun.control.placement import placement_context
    from spotrun.spec import parse_spec
    from spotrun.state import Job

    with world.store.session() as session:
        job = session.get(Job, job_id)
        return placement_context(session, job, parse_spec(spec_text), ["m-a"], world.clock.now())


def progress_now(world, job_id, spec_text):
    """The work done that the trainer's reports give (None: none reported)."""
    return context_now(world, job_id, spec_text).progress


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
    from spotrun.control.progress import restart_overhead, save_interval, step_rate

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
    # nor is the time from it to the attempt's first own checkpoint a gap between saves (400 s, boot and restore)
    assert save_interval(attempts) == pytest.approx(100, abs=10)


def test_a_save_overdue_now_counts_as_the_save_interval(world):
    # the longest gap between saves bounds what a loss costs only while the trainer keeps to it: one that now goes
    # longer without saving stands to lose that much already, before the gap closes
    from spotrun.control.progress import save_interval

    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)
    world.agent(instance)("heartbeat", {"checkpoint_step": 60})
    alive_for(world, instance, 100)
    assert context_now(world, job_id, spec_text).save_interval is None  # one save says nothing of the next
    alive_for(world, instance, 300)
    assert context_now(world, job_id, spec_text).save_interval is None
    world.agent(instance)("heartbeat", {"checkpoint_step": 460})  # a gap of 400 s
    for step in (560, 660):  # then saves every 100 s
        alive_for(world, instance, 100)
        world.agent(instance)("heartbeat", {"checkpoint_step": step})
    attempts = world.job(job_id).placed_attempts
    assert save_interval(attempts) == pytest.approx(400, abs=10)
    alive_for(world, instance, 700)  # beating on, no save for 700 s
    assert context_now(world, job_id, spec_text).save_interval == pytest.approx(700, abs=10)
    world.cloud.reclaim(instance)  # the open gap ends with its attempt: the closed gaps are what is known
    world.tick()
    world.tick()
    assert context_now(world, job_id, spec_text).save_interval == pytest.approx(400, abs=10)


def ran_for_20_minutes(world):
    """A deadline job whose trainer reports nothing, 20 min on its first instance: (spec, job, instance, start)."""
    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)
    started = world.attempts(job_id)[0].started_at
    alive_for(world, instance, 20 * 60)
    return spec_text, job_id, instance, started


def test_a_try_preempted_without_a_word_counts_until_its_last_heartbeat_less_a_save_interval(world):
    # the instance died right after its last heartbeat; the controller noticed one poll later. Counting the try to
    # when that was noticed took each such preemption's detection time as work done, and the work since the
    # trainer's last save: a job without reports then planned with work it had not done, and the replay's jobs
    # missed their deadlines by that much
    spec_text, job_id, instance, started = ran_for_20_minutes(world)
    last_sign = world.clock.now()
    world.tick(25)  # silent, but within the heartbeat timeout (30 s)
    world.cloud.reclaim(instance)
    world.tick(5)
    [first, *_] = world.attempts(job_id)
    assert first.end_reason == "preempted" and first.ended_at >= last_sign + 25
    assert placed_progress(world, job_id, spec_text) == pytest.approx(last_sign - started - 60 - SAVES)


def test_a_try_whose_agent_reported_its_end_counts_until_that_end(world):
    # a save at a preemption notice, a finish, a stop: the agent said so, and the work up to then is kept
    spec_text, job_id, instance, started = ran_for_20_minutes(world)
    world.clock.advance(15)
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.cloud.reclaim(instance)
    world.tick(5)
    [first, *_] = world.attempts(job_id)
    assert first.ended_at is not None and first.ended_at > first.last_heartbeat_at
    assert placed_progress(world, job_id, spec_text) == pytest.approx(first.ended_at - started - 60)


def test_a_lost_try_counts_until_its_last_heartbeat_less_a_save_interval_not_its_timeout(world):
    spec_text, job_id, instance, started = ran_for_20_minutes(world)
    last_sign = world.clock.now()
    for _ in range(5):  # silent past the heartbeat timeout (30 s)
        world.tick(10)
    [first, *_] = world.attempts(job_id)
    assert first.end_reason == "lost" and first.ended_at >= last_sign + 30
    assert placed_progress(world, job_id, spec_text) == pytest.approx(last_sign - started - 60 - SAVES)


def placed_progress(world, job_id, spec_text):
    """What the deadline policy counts as done from the job's tries alone (no reports)."""
    from spotrun.policy.deadline import progress_from_history

    return progress_from_history(context_now(world, job_id, spec_text), 60.0)


def run_then_preempt(world, job_id, with_notice):
    """1 step/s with a checkpoint (of 1,200 steps: the 20 min estimated) every 100 s up to step 460, then spot taken
    back, the trainer saving at a notice and its agent reporting it, or without a word; the next attempt started."""
    first = world.run_to_running(job_id)
    for step in (60, 160, 260, 360, 460):
        world.agent(first)("heartbeat", {"checkpoint_step": step, "total_steps": 1200})
        alive_for(world, first, 100)
    if with_notice:
        world.agent(first)("notice", {"source": "aws", "deadline": world.clock.now() + 120})
        world.agent(first)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.cloud.reclaim(first)
    world.tick()
    world.tick()
    second = world.attempts(job_id)[-1]
    assert second.instance_id is not None and world.attempts(job_id)[0].end_reason == "preempted"
    world.agent(second.instance_id)("started", {"address": "127.0.0.1"})
    return second.instance_id


@pytest.mark.parametrize("with_notice", [True, False])
def test_steps_since_the_newest_checkpoint_count_once_preemptions_came_with_a_save(world, with_notice):
    # a trainer that saves seldom read as standing still between saves: its slack drained and the policy kept it
    # off spot. Its steps since count once its preemptions have all been stops its agent reported (saved at the
    # cloud's notice); after one that came without a word they could be lost, and do not
    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    second = run_then_preempt(world, job_id, with_notice)
    world.agent(second)("heartbeat", {"checkpoint_step": 460, "total_steps": 1200})  # restoring
    alive_for(world, second, 60)  # the restart overhead
    alive_for(world, second, 100)
    world.agent(second)("heartbeat", {"checkpoint_step": 560, "total_steps": 1200})
    alive_for(world, second, 200)  # training on, no checkpoint since
    expected = 560 + 200 if with_notice else 560
    assert progress_now(world, job_id, spec_text) == pytest.approx(expected, abs=5)


def test_before_its_first_checkpoint_an_attempt_counts_from_its_restart_overhead(world):
    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    second = run_then_preempt(world, job_id, with_notice=True)
    launched = world.attempts(job_id)[-1].created_at
    world.agent(second)("heartbeat", {"checkpoint_step": 460, "total_steps": 1200})  # the one it restored
    alive_for(world, second, 400)
    heard = world.attempts(job_id)[-1].last_heartbeat_at
    assert progress_now(world, job_id, spec_text) == pytest.approx(460 + heard - (launched + 60), abs=5)


def test_a_trainer_is_taken_to_save_before_preemptions_only_once_every_one_so_far_was_reported():
    from types import SimpleNamespace

    from spotrun.control.progress import saves_before_preemptions

    def tried(end_reason, reported=None):
        return SimpleNamespace(end_reason=end_reason, reported_outcome=reported)

    assert not saves_before_preemptions([tried(None)])  # nothing seen yet
    assert saves_before_preemptions([tried("preempted", "preempted"), tried("migrated", "preempted"), tried(None)])
    assert not saves_before_preemptions([tried("preempted", "preempted"), tried("preempted")])
    assert not saves_before_preemptions([tried("preempted", "preempted"), tried("lost")])


def test_a_trainer_without_reports_is_taken_to_save_as_often_as_the_sdk_does_by_default():
    from spotrun.control.placement import UNREPORTED_SAVE_INTERVAL
    from spotrun.sdk.schedule import DEFAULT_EVERY_SECONDS

    assert UNREPORTED_SAVE_INTERVAL == DEFAULT_EVERY_SECONDS


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_gang_does_not_count_steps_since_its_checkpoint(nodes):
    # a gang's ranks all restart from the checkpoint whenever one node goes, while the agents beat on
    from types import SimpleNamespace

    from spotrun.control.progress import compute_and_progress
    from spotrun.spec import parse_spec

    def attempt(number, ended_at=None, **fields):
        base = dict(
            number=number, created_at=0.0, ended_at=ended_at, end_reason=None, reported_outcome=None, market="spot",
            checkpoint_step=None, total_steps=None, first_checkpoint_step=None, first_checkpoint_at=None,
            checkpoint_at=None, last_heartbeat_at=None,
        )
        return SimpleNamespace(**{**base, **fields})

    saved_at_notice = attempt(1, 1000.0, end_reason="preempted", reported_outcome="preempted", checkpoint_step=900,
                              total_steps=1200, first_checkpoint_step=100, first_checkpoint_at=100.0,
                              checkpoint_at=900.0)
    runs = attempt(2, created_at=1000.0, checkpoint_step=1000, total_steps=1200, first_checkpoint_step=1000,
                   first_checkpoint_at=1160.0, checkpoint_at=1160.0, last_heartbeat_at=1260.0)
    spec = parse_spec(deadline_spec("default").replace("instance_type: local.cpu", f"instance_type: local.cpu, nodes: {nodes}"))
    _, done = compute_and_progress(SimpleNamespace(placed_attempts=[saved_at_notice, runs]), spec, 60.0)
    assert done == pytest.approx(1100.0 if nodes == 1 else 1000.0)


@pytest.mark.parametrize("use_spot", [False, True])
def test_steps_since_the_newest_checkpoint_count_on_on_demand_before_any_preemption(world, use_spot):
    # on-demand is not taken back, and a move away from it asks the trainer to save first: what it trained since its
    # newest checkpoint is not lost, so it counts before any preemption has shown how the trainer saves. A move to
    # spot near the job's end is weighed on how soon the instance held finishes, which that undercounted by up to a
    # save interval. On spot it waits for that evidence, as before
    spec_text = deadline_spec("default").replace("max_wait: 2h", f"max_wait: 2h, use_spot: {str(use_spot).lower()}")
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)
    assert world.attempts(job_id)[0].market == ("spot" if use_spot else "on-demand")
    for step in (100, 200, 300, 400):  # a step a second, 300 s of it between reports: the rate is known
        world.agent(instance)("heartbeat", {"checkpoint_step": step, "total_steps": 1200})
        alive_for(world, instance, 100)
    alive_for(world, instance, 200)  # training on, no checkpoint since step 400
    expected = 400 if use_spot else 400 + 300
    assert progress_now(world, job_id, spec_text) == pytest.approx(expected, abs=5)


def test_a_running_job_is_told_how_long_a_move_keeps_its_instance_at_least(world):
    # a move waits for the new instance's agent: the quickest boot the job's instances have shown, launch to report
    from types import SimpleNamespace

    from spotrun.control.moves import quickest_boot
    from spotrun.spec import parse_spec
    from spotrun.state import Job

    def tried(created_at, agent_started_at):
        return SimpleNamespace(created_at=created_at, agent_started_at=agent_started_at)

    assert quickest_boot([tried(0.0, None)]) is None
    assert quickest_boot([tried(0.0, 90.0), tried(500.0, 545.0), tried(900.0, None)]) == 45.0
    spec_text = deadline_spec("default")
    job_id = world.submit(spec_text)
    world.tick()  # launched
    [attempt] = world.attempts(job_id)
    world.clock.advance(75)
    world.agent(attempt.instance_id)("started", {"address": "127.0.0.1"})
    world.tick()
    [attempt] = world.attempts(job_id)
    with world.store.session() as session:
        job = session.get(Job, job_id)
        ctx = world.controller.running_context(session, job, parse_spec(spec_text), attempt, attempt.started_at,
                                               world.clock.now())
    assert ctx.move_overlap == pytest.approx(attempt.agent_started_at - attempt.created_at)
    assert 75 <= ctx.move_overlap <= 77
