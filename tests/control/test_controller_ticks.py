"""The reconcile tick against an in-memory cloud, with the real agent API and a manual clock."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from sqlalchemy import select

from spotrun.control import jobs
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.cli.views import attempts_summary, progress_line
from spotrun.control.placement import placement_context
from spotrun.policy import DefaultPolicy
from spotrun.providers import LaunchInvalid
from spotrun.server.views import job_row
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Event, Job

# tests/control is on sys.path via conftest
from memory_cloud import Crash  # noqa: E402
from world import DEADLINE_SPEC, SPEC, alive_for  # noqa: E402


def placement_context_of(world, job_id: int, spec, zones: list[str], now: float):
    with world.store.session() as session:
        return placement_context(session, session.get(Job, job_id), spec, zones, now)


def test_a_job_runs_and_succeeds_and_is_billed(world):
    job_id = world.submit()
    world.tick()
    assert world.job(job_id).state == "PROVISIONING"
    instance = world.attempts(job_id)[0].instance_id
    world.agent(instance)("started", {})
    world.tick(10)
    assert world.job(job_id).state == "RUNNING"
    world.agent(instance)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick(5)
    job = world.job(job_id)
    assert job.state == "SUCCEEDED"
    [attempt] = job.attempts
    assert attempt.end_reason == "succeeded" and attempt.market == "spot"
    assert attempt.billed_seconds == pytest.approx(15.0)
    assert world.cloud.running() == []


def test_preemption_moves_to_another_zone_and_never_counts_as_an_error(world):
    job_id = world.submit()
    first = world.run_to_running(job_id)
    world.cloud.reclaim(first)
    world.tick()
    job = world.job(job_id)
    assert job.state == "PREEMPTED" and job.preemptions == 1 and job.restarts_on_error == 0
    assert job.attempts[0].end_reason == "preempted"
    world.tick()
    second = world.attempts(job_id)[1]
    assert second.zone != job.attempts[0].zone and second.market == "spot"


def test_three_preemptions_fall_back_to_on_demand(world):
    job_id = world.submit()
    for _ in range(3):
        instance = world.run_to_running(job_id)
        world.agent(instance)("notice", {"source": "test", "deadline": None})
        world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
        world.tick()
        assert world.job(job_id).state == "PREEMPTED"
    world.run_to_running(job_id)
    assert [a.market for a in world.attempts(job_id)] == ["spot", "spot", "spot", "on-demand"]


def test_no_capacity_tries_the_next_zone_then_waits(world):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 2h, fallback: wait"))
    for _ in range(3):
        world.tick()
    reasons = [a.end_reason for a in world.attempts(job_id)]
    assert reasons == ["no_capacity"] * 3
    assert sorted(a.zone for a in world.attempts(job_id)) == ["m-a", "m-b", "m-c"]
    world.tick()
    job = world.job(job_id)
    assert job.state == "WAITING" and job.not_before is not None
    world.cloud.capacity["m-b"] = True
    world.tick(1)
    assert world.job(job_id).state == "WAITING"  # still backing off
    for _ in range(4):
        world.tick(5)
    assert world.cloud.running() and world.cloud.running()[0].zone == "m-b"
    tries = world.attempts(job_id)
    summary = attempts_summary(job_row(world.job(job_id), world.clock.now()), len(tries))
    assert summary == f"1 attempt, 0 preemptions ({len(tries) - 1} more launch tries got no instance)", summary


def test_a_crash_is_counted_and_too_many_fail_the_job(world):
    job_id = world.submit()
    for expected_restarts in (1, 2):
        instance = world.run_to_running(job_id)
        world.agent(instance)("exit", {"outcome": "failed", "exit_code": 3})
        world.tick()
        assert world.job(job_id).restarts_on_error == expected_restarts
    job = world.job(job_id)
    assert job.state == "FAILED" and "failed 2 times" in job.failure_reason
    assert world.cloud.running() == []


def test_an_instance_that_cannot_start_the_agent_fails_the_attempt_at_the_boot_timeout_and_counts(world):
    """A provider that knows why the agent never started (Kubernetes: an image that cannot be pulled) makes the
    attempt fail, counted against max_restarts_on_error, where silence alone is lost and relaunched without end."""
    job_id = world.submit()
    world.tick()
    silent = world.attempts(job_id)[0].instance_id
    world.tick(61)  # past boot_timeout (60 s): no start failure known, the instance is lost
    assert world.attempts(job_id)[0].end_reason == "lost" and world.job(job_id).restarts_on_error == 0
    for _ in range(2):  # max_restarts_on_error: 1
        world.tick()
        pulling = world.attempts(job_id)[-1].instance_id
        assert pulling != silent
        info = world.cloud.instances[pulling]
        world.cloud.instances[pulling] = replace(
            info, state="pending", start_failure='ImagePullBackOff: Back-off pulling image "acme/trian:1"')
        world.tick(61)
    failed = world.attempts(job_id)[-1]
    assert failed.end_reason == "failed"
    job = world.job(job_id)
    assert job.state == "FAILED" and job.restarts_on_error == 2
    with world.store.session() as session:
        endings = [e.message for e in session.query(Event).filter_by(job_id=job_id, kind="attempt_ending")]
    assert any("could not start the agent: ImagePullBackOff" in message for message in endings), endings


def test_lost_heartbeat_replaces_the_instance(world):
    job_id = world.submit()
    first = world.run_to_running(job_id)
    world.tick(31)
    attempts = world.attempts(job_id)
    assert attempts[0].end_reason == "lost"
    assert world.cloud.describe(first).state == "terminated"
    world.tick()
    assert len(world.cloud.running()) == 1


def test_a_cancel_asked_twice_is_accepted_twice_and_recorded_once(world):
    """Two `spotrun cancel` (or a button pressed twice) recorded two cancel_requested events."""
    from spotrun.state import Event

    job_id = world.submit()
    world.run_to_running(job_id)
    assert jobs.request_cancel(world.store, job_id, world.clock.now())
    assert jobs.request_cancel(world.store, job_id, world.clock.now())
    with world.store.session() as session:
        assert session.query(Event).filter_by(job_id=job_id, kind="cancel_requested").count() == 1
    world.tick()
    assert world.job(job_id).state == "CANCELLED"
    assert not jobs.request_cancel(world.store, job_id, world.clock.now())


def test_cancel_terminates_the_instance(world):
    job_id = world.submit()
    world.run_to_running(job_id)
    assert jobs.request_cancel(world.store, job_id, world.clock.now())
    world.tick()
    job = world.job(job_id)
    assert job.state == "CANCELLED" and job.attempts[0].end_reason == "cancelled"
    assert world.cloud.running() == []
    assert not jobs.request_cancel(world.store, job_id, world.clock.now())


@pytest.mark.parametrize("answer_lost", [False, True])
def test_a_cancel_while_a_launch_is_retried_launches_nothing_more(world, monkeypatch, answer_lost):
    """The launch was tried again after the cancel: an instance made for a job already cancelled, and charged."""
    real_launch, tries = world.cloud.launch, []

    def fails_once(request):
        tries.append(request.client_token)
        if len(tries) == 1:
            if answer_lost:  # the cloud made it, and the answer was lost on the way
                real_launch(request)
            raise RuntimeError("connection reset")
        return real_launch(request)

    monkeypatch.setattr(world.cloud, "launch", fails_once)
    job_id = world.submit()
    world.tick()
    assert jobs.request_cancel(world.store, job_id, world.clock.now())
    world.tick()
    job = world.job(job_id)
    assert len(tries) == 1 and job.state == "CANCELLED" and job.attempts[0].end_reason == "cancelled"
    assert world.cloud.running() == []  # a made instance is found by its token and ended


def test_max_wait_fails_a_job_that_waits_too_long(world):
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 60s, fallback: wait"))
    for _ in range(20):
        world.tick(10)
    job = world.job(job_id)
    assert job.state == "FAILED" and "max_wait" in job.failure_reason


def test_crash_right_after_launch_does_not_launch_twice(world):
    job_id = world.submit()
    world.cloud.crash_after_launch = True
    with pytest.raises(Crash):
        world.tick()
    assert len(world.cloud.instances) == 1
    assert world.attempts(job_id)[0].instance_id is None  # the controller died before recording it
    world.controller = world.new_controller()  # a new process
    world.tick()
    assert len(world.cloud.instances) == 1
    [attempt] = world.attempts(job_id)
    assert attempt.instance_id == next(iter(world.cloud.instances))


def test_crash_between_terminate_and_record_finishes_cleanly(world):
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "succeeded", "exit_code": 0})
    world.cloud.crash_after_terminate = True
    with pytest.raises(Crash):
        world.tick()
    assert world.job(job_id).state == "RUNNING"
    world.controller = world.new_controller()
    world.tick()
    job = world.job(job_id)
    assert job.state == "SUCCEEDED" and len(job.attempts) == 1 and world.cloud.running() == []


def test_agent_api_refuses_another_attempts_token(world):
    job_id = world.submit()
    world.tick()
    instance = world.attempts(job_id)[0].instance_id
    config = json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])
    bad = world.api.post(
        f"/agent/v1/attempts/{config['attempt_id']}/heartbeat", json={}, headers={"Authorization": "Bearer nope"}
    )
    assert bad.status_code == 403
    assert world.attempts(job_id)[0].last_heartbeat_at is None


def test_log_chunks_are_idempotent(world):
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    post = world.agent(instance)
    post("logs", {"offset": 0, "data": "hello\n"})
    post("logs", {"offset": 0, "data": "hello\n"})  # a retry
    assert post("logs", {"offset": 6, "data": "world\n"})["size"] == 12
    config = json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])
    gap = world.api.post(
        f"/agent/v1/attempts/{config['attempt_id']}/logs", json={"offset": 99, "data": "x"},
        headers={"Authorization": f"Bearer {config['token']}"},
    )
    assert gap.status_code == 409


def test_a_log_past_2_gib_goes_on_and_an_exit_code_out_of_range_is_refused_by_name(world):
    """PostgreSQL's 32-bit column refused the update past 2 GiB (a 500 for every later chunk, and the log stopped)."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    with world.store.session() as session:
        session.get(Attempt, world.attempts(job_id)[0].id).log_bytes = 2**31 - 3  # as if that much had come
    post = world.agent(instance)
    assert post("logs", {"offset": 2**31 - 3, "data": "hello\n"})["size"] == 2**31 + 3
    assert world.attempts(job_id)[0].log_bytes == 2**31 + 3
    config = json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])
    refused = world.api.post(
        f"/agent/v1/attempts/{config['attempt_id']}/exit", json={"outcome": "failed", "exit_code": 3221225477},
        headers={"Authorization": f"Bearer {config['token']}"},
    )
    assert refused.status_code == 422 and "exit_code" in refused.text
    assert world.attempts(job_id)[0].reported_outcome is None


def test_a_requested_move_drains_the_trainer_then_places_again(world):
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    post = world.agent(instance)
    assert post("heartbeat", {})["stop"] is None
    attempt = world.attempts(job_id)[0]
    world.controller.request_move(attempt.id, "spot is back in m-b")
    assert "spot is back" in post("heartbeat", {})["stop"]
    world.tick()
    assert world.job(job_id).state == "RUNNING"  # waiting for the trainer's checkpoint
    post("notice", {"source": "controller", "deadline": None})
    post("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    job = world.job(job_id)
    assert job.attempts[0].end_reason == "migrated"
    assert job.state == "PROVISIONING" and job.preemptions == 0 and job.restarts_on_error == 0
    world.tick()
    assert len(world.cloud.running()) == 1 and world.cloud.running()[0].instance_id != instance


def test_a_move_the_agent_ignores_is_forced_after_the_grace(world):
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.controller.request_move(world.attempts(job_id)[0].id, "test")
    for _ in range(4):
        world.tick(10)
        world.agent(instance)("heartbeat", {})
    assert world.attempts(job_id)[0].ended_at is None
    world.tick(10)
    assert world.attempts(job_id)[0].end_reason == "migrated"
    assert world.cloud.describe(instance).state == "terminated"


def test_an_instance_the_cloud_cannot_describe_and_a_silent_agent_is_lost_only_after_the_unknown_timeout(world):
    job_id = world.submit()
    instance = world.run_to_running(job_id)

    def failing_describe(instance_id):
        raise ConnectionError("the cloud's API is down")

    world.cloud.describe = failing_describe
    world.tick(300)
    assert world.attempts(job_id)[0].ended_at is None  # unknown is not a verdict
    world.tick(301)
    assert world.attempts(job_id)[0].end_reason == "lost"
    assert world.cloud.instances[instance].state == "terminated"


@pytest.mark.parametrize(
    ("resources", "field", "words"),
    [
        ("{cloud: nimbus, instance_type: x}", "resources.cloud", "unknown cloud 'nimbus'"),
        # a misspelt cloud is named as such, not as a missing instance type
        ("{cloud: gpc}", "resources.cloud", "unknown cloud 'gpc'; known: local, aws, gcp, azure, kubernetes"),
        ("{cloud: aws, instance_type: p9.mega}", "resources.instance_type", "p9.mega"),
        ("{cloud: aws, accelerators: V100}", "resources.instance_type", "needs an instance type"),
        # priced by the job itself, so the catalog never looks at the GPU; GCE is asked for it by name
        ("{cloud: gcp, instance_type: n1-standard-8, accelerators: {RTX4090: 1}, prices: {on_demand: 3, spot: 1}}",
         "resources.accelerators", "unknown accelerator 'RTX4090'"),
    ],
)
def test_a_job_that_could_never_be_placed_or_billed_is_refused_before_it_is_stored(world, resources, field, words):
    from spotrun.spec import SpecError

    with pytest.raises(SpecError) as refused:
        jobs.submit(world.store, parse_spec(f"run: 'true'\nresources: {resources}\n"), 0.0, source="job.yaml")
    (problem,) = refused.value.problems
    assert problem.field == field and words in problem.message
    with world.store.session() as session:
        assert session.query(Job).count() == 0


@pytest.mark.parametrize(
    ("spot", "extra", "words"),
    [
        ("{deadline: '2020-01-01T00:00:00Z'}", "", "must be after the launch; it is 3,728.7 days before it"),
        ("{deadline: 0s}", "", "must be after the launch"),
        ("{deadline: 2h}", "estimated_duration: 3h\n", "leaves 2 h from submission, less than the estimated_duration (3 h)"),
        ("{deadline: 3h, restart_overhead: 30m}", "estimated_duration: 3h\n",
         "less than the estimated_duration plus spot.restart_overhead (3.5 h)"),
        # as a duration past ten years is: the deadline planner's grid over centuries held the controller's tick
        ("{deadline: '9999-12-31T00:00:00Z', restart_overhead: 3650d, policy: deadline_aware}",
         "estimated_duration: 1h\n", "must be at most 3650d (10 years) after the launch"),
    ],
)
def test_a_deadline_no_placement_could_keep_is_refused_before_it_is_stored(world, spot, extra, words):
    from spotrun.spec import SpecError

    now = 1.9e9  # 2030: the absolute deadline above is past
    with pytest.raises(SpecError) as refused:
        jobs.submit(world.store, parse_spec(f"run: 'true'\nspot: {spot}\n{extra}"), now, source="job.yaml")
    (problem,) = refused.value.problems
    assert problem.field == "spot.deadline" and words in problem.message, problem.message
    with world.store.session() as session:
        assert session.query(Job).count() == 0
    # just in reach is accepted
    jobs.submit(world.store, parse_spec("run: 'true'\nspot: {deadline: 3h}\nestimated_duration: 3h\n"), now)


def test_a_command_that_starts_and_ends_between_two_ticks_succeeds(world):
    job_id = world.submit()
    world.tick()
    post = world.agent(world.attempts(job_id)[0].instance_id)
    post("started", {})
    post("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick()
    job = world.job(job_id)
    assert job.state == "SUCCEEDED" and job.attempts[0].end_reason == "succeeded"


def job_events(world, job_id: int) -> list[Event]:
    with world.store.session() as session:
        return session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id)).all()


def test_a_command_that_starts_and_ends_between_two_ticks_reads_as_running_before_its_end(world):
    """Readers list a job's events by id (`--follow`, `spotrun status`, the dashboard): the job ran on the attempt,
    then the attempt ended; its move to RUNNING is dated when the agent started, not when the controller saw it."""
    job_id = world.submit()
    world.tick()
    post = world.agent(world.attempts(job_id)[0].instance_id)
    post("started", {})
    started_at = world.clock.now()
    world.clock.advance(5)
    post("exit", {"outcome": "failed", "exit_code": 3, "checkpoint_synced": True})
    world.tick()

    events = job_events(world, job_id)
    read = [(e.kind, (e.data or {}).get("to")) for e in events]
    running = read.index(("state", "RUNNING"))
    assert running < read.index(("attempt_ending", None)) < read.index(("attempt_ended", None)), read
    assert events[running].at == started_at
    assert "agent started on" in events[running].message



def test_a_running_job_with_a_deadline_is_put_to_its_policy_and_moved_when_it_says_so(world, scripted):
    from spotrun.policy import Keep, Launch

    job_id = world.submit(DEADLINE_SPEC)
    instance = world.run_to_running(job_id)
    attempt = world.attempts(job_id)[0]
    scripted.answer = Keep("fine")
    alive_for(world, instance, 61)
    assert scripted.asked == 1 and world.attempts(job_id)[0].state == "running"
    alive_for(world, instance, 10)
    assert scripted.asked == 1  # asked again only after reconsider_every
    scripted.answer = Launch(attempt.zone, attempt.market, "same place")
    alive_for(world, instance, 61)
    assert scripted.asked == 2 and world.attempts(job_id)[0].state == "running"
    elsewhere = "m-c" if attempt.zone != "m-c" else "m-a"
    scripted.answer = Launch(elsewhere, "on-demand", "the deadline needs on-demand")
    alive_for(world, instance, 61)
    first, standby = world.attempts(job_id)  # the move is made before it breaks anything (test_controller_moves)
    assert first.state == "running" and world.agent(instance)("heartbeat", {})["stop"] is None
    assert (standby.zone, standby.market, standby.standby_for) == (elsewhere, "on-demand", first.id)


def test_a_policy_that_gives_up_on_a_running_job_fails_it(world, scripted):
    from spotrun.policy import GiveUp

    job_id = world.submit(DEADLINE_SPEC)
    instance = world.run_to_running(job_id)
    scripted.answer = GiveUp("the deadline cannot be met any more")
    alive_for(world, instance, 61)
    job = world.job(job_id)
    assert job.state == "FAILED" and "cannot be met" in job.failure_reason and world.cloud.running() == []


def test_jobs_without_a_deadline_are_not_reconsidered(world, scripted):
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 2h, policy: scripted"))
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 200)
    assert scripted.asked == 0 and world.attempts(job_id)[0].state == "running"


@pytest.mark.parametrize("policy_name", ["default", "uniform_progress", "greedy"])
def test_the_real_deadline_policies_run_inside_the_controller_without_errors(world, caplog, policy_name):
    spec = SPEC.replace("max_wait: 2h", f"max_wait: 2h, deadline: 3h, policy: {policy_name}") + "estimated_duration: 2h\n"
    job_id = world.submit(spec)
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 400)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert world.attempts(job_id)[0].state in ("running", "draining")


def test_unknown_policy_is_refused_and_given_prices_replace_the_catalog(world):
    from spotrun.spec import SpecError

    with pytest.raises(SpecError) as refused:
        jobs.submit(world.store, parse_spec("run: 'true'\nspot: {policy: clairvoyant}\n"), 0.0, source="job.yaml")
    assert refused.value.problems[0].field == "spot.policy"
    # a type the catalog lacks is fine once the job names its prices, and the attempt is billed at them
    priced = "run: 'true'\nresources: {cloud: azure, instance_type: Standard_NC6s_v3, prices: {on_demand: 3.06, spot: 0.9}}\n"
    job_id = jobs.submit(world.store, parse_spec(priced), 0.0, source="job.yaml")
    world.controller = Controller(
        world.store, ControllerSettings(controller_url="http://unused"), clock=world.clock,
        provider_factory=lambda name: world.cloud,
    )
    world.tick()
    attempt = world.attempts(job_id)[0]
    assert (attempt.price_per_hour, attempt.on_demand_price_per_hour) == (0.9, 3.06)


@pytest.mark.parametrize(
    ("spot", "refused"),
    [
        ("{use_spot: false, policy: uniform_progress}", "places the job on spot, but spot.use_spot is false"),
        ("{use_spot: false, policy: greedy}", "places the job on spot, but spot.use_spot is false"),
        ("{use_spot: false, policy: deadline_aware}", "places the job on spot, but spot.use_spot is false"),
        ("{fallback: wait, policy: uniform_progress}", "runs the job on on-demand, but spot.fallback is 'wait'"),
        ("{fallback: wait, policy: on_demand}", "runs the job on on-demand, but spot.fallback is 'wait'"),
        ("{use_spot: false, policy: on_demand}", None),
        ("{use_spot: false, deadline: 3h}", None),  # the default policy keeps to on-demand
        ("{fallback: wait, deadline: 3h}", None),  # ... and to spot
    ],
)
def test_a_policy_that_would_break_the_jobs_own_market_settings_is_refused_at_submit(world, spot, refused):
    from spotrun.spec import SpecError

    spec = parse_spec(f"run: 'true'\nspot: {spot}\nestimated_duration: 2h\n")
    if refused is None:
        assert jobs.submit(world.store, spec, 0.0, source="job.yaml") > 0
        return
    with pytest.raises(SpecError) as error:
        jobs.submit(world.store, spec, 0.0, source="job.yaml")
    [problem] = error.value.problems
    assert problem.field == "spot.policy" and refused in problem.message
    with world.store.session() as session:
        assert session.query(Job).count() == 0  # nothing stored


def test_a_zone_the_local_cloud_does_not_offer_is_refused_by_submit_itself(world):
    """Checked unless the caller names other zones: a caller of `submit` that named none (only `spotrun launch` and the
    server passed the local cloud's) stored a job in a zone nothing offers, which failed at its first tick."""
    from spotrun.spec import SpecError

    with pytest.raises(SpecError) as error:
        jobs.submit(world.store, parse_spec("run: 'true'\nspot: {zones: [local-a, mars-1]}\n"), 0.0, source="job.yaml")
    [problem] = error.value.problems
    assert problem.field == "spot.zones[1]"
    assert problem.message == "unknown zone 'mars-1'; the local cloud's zones are local-a, local-b, local-c"
    with world.store.session() as session:
        assert session.query(Job).count() == 0  # nothing stored
    assert jobs.submit(world.store, parse_spec("run: 'true'\nspot: {zones: [local-a, local-c]}\n"), 0.0) > 0


def test_the_sdks_reported_steps_become_the_policys_progress(world):
    job_id = world.submit(SPEC + "estimated_duration: 10h\n")
    instance = world.run_to_running(job_id)
    post = world.agent(instance)
    spec = parse_spec(SPEC + "estimated_duration: 10h\n")
    assert placement_context_of(world, job_id, spec, ["m-a"], world.clock.now()).progress is None  # nothing said
    post("heartbeat", {"checkpoint_step": 30})
    assert placement_context_of(world, job_id, spec, ["m-a"], world.clock.now()).progress is None  # no total known
    post("heartbeat", {"checkpoint_step": 30, "total_steps": 120})
    [attempt] = world.attempts(job_id)
    assert (attempt.checkpoint_step, attempt.total_steps) == (30, 120)
    assert placement_context_of(world, job_id, spec, ["m-a"], world.clock.now()).progress == pytest.approx(2.5 * 3600)
    row = job_row(world.job(job_id), world.clock.now())
    assert (row.checkpoint_step, row.total_steps) == (30, 120)
    assert "checkpoint step 30 of 120 (25%)" in progress_line(row).plain
    no_duration = parse_spec(SPEC)
    assert placement_context_of(world, job_id, no_duration, ["m-a"], world.clock.now()).progress is None


def report_steps(world, instance, steps, seconds_apart, total=1000):
    """The agent reports each of `steps` as its newest checkpoint, `seconds_apart` after the one before."""
    for step in steps:
        world.agent(instance)("heartbeat", {"checkpoint_step": step, "total_steps": total})
        alive_for(world, instance, seconds_apart)


def test_without_an_estimated_duration_the_step_rate_gives_the_policy_one(world):
    spec_text = SPEC.replace("max_wait: 2h", "max_wait: 2h, deadline: 10h")
    spec = parse_spec(spec_text)
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)

    def ctx():
        return placement_context_of(world, job_id, spec, ["m-a"], world.clock.now())

    assert ctx().estimated_duration is None and ctx().progress is None  # nothing reported yet
    report_steps(world, instance, [0, 20, 40], 100)  # 40 steps in 200 s: too little time to plan with
    assert ctx().estimated_duration is None
    report_steps(world, instance, [60, 80], 100)  # 80 steps in 400 s: 0.2 steps/s
    assert ctx().estimated_duration == pytest.approx(1000 / 0.2) and ctx().progress == pytest.approx(80 / 0.2)
    world.cloud.reclaim(instance)
    world.tick(20)
    world.tick(20)
    resumed = world.attempts(job_id)[-1].instance_id
    assert resumed != instance
    world.agent(resumed)("started", {"address": "127.0.0.1"})
    world.tick()
    report_steps(world, resumed, [80, 120, 160], 100)  # the new attempt, twice as fast: 40 steps in 100 s
    # the rate counts each attempt from the first checkpoint it wrote (not the step 80 it restored and reported
    # while restoring it): (80 + 40) steps in (400 + 100) s; the gap between the attempts and the new attempt's
    # start are the restarts the policy counts itself
    assert ctx().estimated_duration == pytest.approx(1000 / (120 / 500))
    assert ctx().progress == pytest.approx(160 / (120 / 500))
    given = parse_spec(spec_text + "estimated_duration: 3h\n")  # a duration the job names wins
    assert placement_context_of(world, job_id, given, ["m-a"], world.clock.now()).estimated_duration == 3 * 3600


def test_the_restart_overhead_is_measured_from_when_each_attempt_trained_again(world):
    spec_text = SPEC.replace("max_wait: 2h", "max_wait: 2h, deadline: 10h")
    job_id = world.submit(spec_text)

    def overhead():
        return placement_context_of(world, job_id, parse_spec(spec_text), ["m-a"], world.clock.now()).restart_overhead

    launched = world.clock.now()
    world.tick()
    instance = world.attempts(job_id)[0].instance_id
    world.agent(instance)("started", {"address": "127.0.0.1"})  # (a lost attempt's heartbeats are no longer kept)
    alive_for(world, instance, 120)  # booting, then training from step 0 at 1 step/s: its first report at step 60
    trained_from = world.clock.now() - 60
    report_steps(world, instance, [60, 160, 260, 360], 100)
    assert overhead() == pytest.approx(trained_from - launched, abs=1)  # ~60 s from launch to the first step

    world.cloud.reclaim(instance)  # the newest checkpoint reported: step 360
    world.tick(20)
    world.tick(20)
    second = world.attempts(job_id)[-1]
    world.agent(second.instance_id)("started", {"address": "127.0.0.1"})
    alive_for(world, second.instance_id, 300)  # 5 minutes to boot and restore, then 40 steps at 1 step/s
    report_steps(world, second.instance_id, [400, 500, 600], 100)
    second_overhead = world.clock.now() - 300 - 40 - second.created_at  # its first report came 300 s ago
    assert second_overhead > 200 and overhead() == pytest.approx(second_overhead, abs=2)  # the longer one

    named = parse_spec(spec_text.replace("deadline: 10h", "deadline: 10h, restart_overhead: 2m"))
    assert placement_context_of(world, job_id, named, ["m-a"], world.clock.now()).restart_overhead == 120


def test_the_default_policy_plans_a_deadline_job_from_its_step_rate(world, caplog):
    from spotrun.policy.default import DefaultPolicy

    spec_text = SPEC.replace("max_wait: 2h", "max_wait: 2h, deadline: 3h")
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)
    report_steps(world, instance, [0, 100, 200, 300, 400], 100)  # 1 step/s, 1,000 steps: 1,000 s of compute
    ctx = placement_context_of(world, job_id, parse_spec(spec_text), ["m-a", "m-b"], world.clock.now())
    assert DefaultPolicy._has_deadline(ctx) and ctx.estimated_duration == pytest.approx(1000)
    alive_for(world, instance, 200)  # the controller puts the running job to the deadline-aware policy
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@pytest.mark.parametrize("policy_name", ["uniform_progress", "deadline_aware"])
def test_a_planning_policy_runs_a_deadline_job_without_an_estimate_until_its_rate_is_known(world, caplog, policy_name):
    spec_text = SPEC.replace("max_wait: 2h", f"max_wait: 2h, deadline: 3h, policy: {policy_name}")
    job_id = world.submit(spec_text)
    instance = world.run_to_running(job_id)  # no compute known: placed as the default policy places it, to be measured
    report_steps(world, instance, [0, 100, 200, 300, 400], 100)  # 1 step/s, 1,000 steps: 1,000 s of compute
    ctx = placement_context_of(world, job_id, parse_spec(spec_text), ["m-a", "m-b"], world.clock.now())
    assert ctx.estimated_duration == pytest.approx(1000)
    planned = world.controller.policy(parse_spec(spec_text)).decide(ctx)
    assert "least expected cost" in planned.reason or "uniform progress" in planned.reason
    alive_for(world, instance, 200)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert world.attempts(job_id)[0].state == "running"


@pytest.mark.parametrize("body", [{"checkpoint_step": 3, "total_steps": 0}, {"checkpoint_step": -1}, {"total_steps": "x"}])
def test_a_heartbeat_with_impossible_steps_is_refused_and_changes_nothing(world, body):
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("heartbeat", {"checkpoint_step": 5, "total_steps": 50})
    config = json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])
    response = world.api.post(
        f"/agent/v1/attempts/{config['attempt_id']}/heartbeat", json=body,
        headers={"Authorization": f"Bearer {config['token']}"},
    )
    assert response.status_code == 422
    [attempt] = world.attempts(job_id)
    assert (attempt.checkpoint_step, attempt.total_steps) == (5, 50)


def test_a_heartbeat_with_a_field_the_agent_never_sends_is_refused_naming_it(world):
    """It was taken, the field ignored: the agent sends checkpoint_step and total_steps alone."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("heartbeat", {"checkpoint_step": 5, "total_steps": 50})
    config = json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])
    response = world.api.post(
        f"/agent/v1/attempts/{config['attempt_id']}/heartbeat", json={"checkpoint_step": 6, "checkpoint_stpe": 7},
        headers={"Authorization": f"Bearer {config['token']}"},
    )
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "checkpoint_stpe"] and problem["type"] == "extra_forbidden"
    [attempt] = world.attempts(job_id)
    assert (attempt.checkpoint_step, attempt.total_steps) == (5, 50)


def test_a_total_below_the_checkpoints_step_keeps_the_training_and_shows_no_progress_past_100(world):
    """A wrong `Checkpointer(total_steps=...)` showed "step 500 of 100 (500%)". Refusing the heartbeat instead would
    have the controller take the agent for lost and end the training: the heartbeat is kept, the total not."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    for _ in range(3):  # past the heartbeat timeout (30 s)
        world.agent(instance)("heartbeat", {"checkpoint_step": 500, "total_steps": 100})
        world.tick(20)
    [attempt] = world.attempts(job_id)
    assert attempt.state == "running" and attempt.end_reason is None
    assert (attempt.checkpoint_step, attempt.total_steps) == (500, None)
    row = job_row(world.job(job_id), world.clock.now())
    assert "checkpoint step 500 ·" in progress_line(row).plain and "%" not in progress_line(row).plain
    world.agent(instance)("heartbeat", {"checkpoint_step": 100, "total_steps": 100})  # done: 100%, not dropped
    assert "checkpoint step 100 of 100 (100%)" in progress_line(job_row(world.job(job_id), world.clock.now())).plain


def test_a_job_learns_from_the_spot_other_jobs_of_its_instance_type_saw(world):
    """Job A's spot run that lasted 100 s reaches job B's policy; a job of another instance type, B's own tries and
    tries older than the window do not."""
    first = world.submit()
    other_type = world.submit(SPEC.replace("instance_type: local.cpu", "instance_type: local.gpu"))
    zone = world.spot_lost_after(first, 100)
    second_text = SPEC.replace("max_wait: 2h", "max_wait: 2h, deadline: 10h") + "estimated_duration: 5h\n"
    second = world.submit(second_text)
    spec = parse_spec(second_text)

    def ctx():
        with world.store.session() as session:
            job = session.get(Job, second)
            return placement_context(
                session, job, spec, ["m-a", "m-b", "m-c"], world.clock.now(),
                market=world.controller.market_tries(session, job, spec, world.clock.now()),
            )

    seen = ctx()
    assert world.attempts(other_type), "the other instance type's job was placed too"
    assert len(seen.market) == len(world.attempts(first))  # job A's tries only: not the other type's
    assert seen.spot_log().zone(zone).lifetimes == [pytest.approx(100.0, abs=2.0)]
    assert seen.history == ()
    world.tick()
    assert world.attempts(second), "job B was placed"
    assert len(ctx().market) == len(world.attempts(first))  # B's own tries stay in its history, not its market
    world.clock.advance(world.controller.settings.market_history + 1)
    assert ctx().market == ()


def test_a_busy_market_reaches_a_policy_as_its_newest_tries_only(world):
    """Many jobs refused spot for days write hundreds of thousands of tries; a placement reads at most
    `market_history_tries` of them, the newest, still oldest first."""
    waiting = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 30d, fallback: wait"))
    for zone in world.cloud.capacity:
        world.cloud.capacity[zone] = False
    while len(world.attempts(waiting)) < 8:
        world.tick(world.controller.settings.backoff_max + 1)
    tries = world.attempts(waiting)
    spec = parse_spec(SPEC)
    later = world.submit()

    def market(limit):
        world.controller.settings.market_history_tries = limit
        with world.store.session() as session:
            return world.controller.market_tries(session, session.get(Job, later), spec, world.clock.now())

    assert [(t.zone, t.created_at) for t in market(100)] == [(a.zone, a.created_at) for a in tries]
    assert [(t.zone, t.created_at) for t in market(5)] == [(a.zone, a.created_at) for a in tries[-5:]]


def test_jobs_without_a_deadline_avoid_the_zone_another_job_just_lost_spot_in(world):
    """Job A loses spot in zone Z; the next jobs place spot elsewhere, though some of them would have tried Z first."""
    first = world.submit()
    zone = world.spot_lost_after(first, 100)
    later = [world.submit() for _ in range(6)]
    spec = parse_spec(SPEC)

    def first_zone_without_news(job_id):
        with world.store.session() as session:
            ctx = placement_context(session, session.get(Job, job_id), spec, ["m-a", "m-b", "m-c"], world.clock.now())
        return DefaultPolicy().place(ctx).zone

    assert zone in {first_zone_without_news(job_id) for job_id in later}, "no job here would have tried Z first"
    world.tick()
    placed = [world.attempts(job_id)[0] for job_id in later]
    assert all(attempt.market == "spot" and attempt.zone != zone for attempt in placed)


def test_spot_launches_bid_the_users_max_price_else_the_on_demand_price(world):
    default_cap = world.submit()
    capped = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 2h, max_price: 1.5"))
    world.tick()
    [first], [second] = world.attempts(default_cap), world.attempts(capped)
    assert (first.market, first.max_price) == ("spot", 3.0)  # the on-demand price of `prices` above
    assert (second.market, second.max_price) == ("spot", 1.5)
    assert sorted(request.max_price for request in world.cloud.requests) == [1.5, 3.0]  # what the cloud was sent


def test_a_launch_whose_every_answer_was_lost_takes_the_instance_it_made_when_it_gives_up(world, monkeypatch):
    """The cloud made the instance, but every answer was lost until launch_timeout: the attempt ended as a launch
    error with no instance, and the instance ran unbilled until the orphan sweep terminated it."""
    real_launch = world.cloud.launch

    def made_but_unheard(request):
        if world.cloud.find_by_token(request.client_token) is None:
            real_launch(request)
        raise RuntimeError("read timeout")

    monkeypatch.setattr(world.cloud, "launch", made_but_unheard)
    job_id = world.submit()
    for _ in range(7):  # past launch_timeout (300 s)
        world.tick(60)
    [made] = world.cloud.instances
    [attempt] = world.attempts(job_id)
    assert attempt.instance_id == made and attempt.state == "running" and attempt.end_reason is None
    world.agent(made)("started", {"address": "127.0.0.1"})
    world.tick(1)
    assert world.job(job_id).state == "RUNNING"


def test_an_instance_the_cloud_accepted_then_could_not_place_ends_as_that_refusal_and_costs_nothing(world):
    """Azure answers a create at once and fails the allocation later (ZonalAllocationFailed): the attempt ended as
    "lost", charged the minimum, and the zone's spot market learnt of no refusal."""
    job_id = world.submit()
    world.tick()
    [attempt] = world.attempts(job_id)
    failed = world.cloud.instances[attempt.instance_id]
    world.cloud.instances[attempt.instance_id] = replace(
        failed, state="terminated", terminated_at=world.clock.now() + 20,
        detail={"refusal": "no_capacity", "reason": "ZonalAllocationFailed: not enough capacity in this zone"},
    )
    world.tick(30)
    [refused, *_] = world.attempts(job_id)
    assert (refused.end_reason, refused.billed_seconds, refused.charged_seconds) == ("no_capacity", 0.0, 0.0)
    assert world.job(job_id).state in ("PROVISIONING", "PENDING")
    with world.store.session() as session:
        said = session.scalars(select(Event.message).where(Event.attempt_id == refused.id)).all()
    assert any("could not place" in message and "ZonalAllocationFailed" in message for message in said)


def test_a_spot_instance_already_taken_back_when_its_launch_answers_ends_as_a_preemption(world, monkeypatch):
    """GCE preempted and deleted a spot VM between its insert and the launch's look: the provider answers it gone
    and reclaimed, and the attempt ends as a preemption (it was retried as a launch error until its timeout)."""
    launch = world.cloud.launch

    def taken_back_at_once(request):
        info = launch(request)
        world.cloud.reclaim(info.instance_id)
        return world.cloud.instances[info.instance_id]

    monkeypatch.setattr(world.cloud, "launch", taken_back_at_once)
    job_id = world.submit()
    world.tick()
    world.tick()
    job = world.job(job_id)
    assert (job.attempts[0].end_reason, job.preemptions, job.restarts_on_error) == ("preempted", 1, 0)


def test_an_instance_the_cloud_accepted_then_refused_as_no_retry_can_mend_fails_the_job_saying_why(world):
    """Azure fails a create it accepted for a missing image or a bad parameter: the job was placed again, forever."""
    job_id = world.submit()
    world.tick()
    [attempt] = world.attempts(job_id)
    failed = world.cloud.instances[attempt.instance_id]
    world.cloud.instances[attempt.instance_id] = replace(
        failed, state="terminated",
        detail={"refusal": "launch_invalid", "reason": "ImageNotFound: the image referenced by the VM was deleted"},
    )
    world.tick(30)
    job = world.job(job_id)
    assert job.state == "FAILED" and "ImageNotFound" in job.failure_reason
    assert [(a.end_reason, a.billed_seconds) for a in job.attempts] == [("launch_invalid", 0.0)]


def test_a_launch_no_retry_can_mend_fails_the_job_saying_why(world, monkeypatch):
    """A startup script over the cloud's limit was retried as a transient error for as long as the job lived."""
    def too_big(request):
        raise LaunchInvalid("startup script is 17816 bytes; EC2 user data is limited to 16384 bytes")

    monkeypatch.setattr(world.cloud, "launch", too_big)
    job_id = world.submit()
    world.tick()
    job = world.job(job_id)
    assert job.state == "FAILED" and "EC2 user data is limited to 16384 bytes" in job.failure_reason
    assert [(a.end_reason, a.billed_seconds) for a in job.attempts] == [("launch_invalid", 0.0)]


def launches_made_but_unheard(world, monkeypatch) -> list[str]:
    """The cloud makes the first launch's instance, but every launch answer is lost, and so is every lookup by its
    token once it is made: the instances so made."""
    real_launch, real_find, made = world.cloud.launch, world.cloud.find_by_token, []

    def made_but_unheard(request):
        if not made:
            made.append(real_launch(request).instance_id)
        raise RuntimeError("read timeout")

    def lookup_that_fails_once_made(token):
        if made:
            raise RuntimeError("read timeout")
        return real_find(token)

    monkeypatch.setattr(world.cloud, "launch", made_but_unheard)
    monkeypatch.setattr(world.cloud, "find_by_token", lookup_that_fails_once_made)
    return made


@pytest.mark.parametrize("crash", [False, True])
def test_an_orphan_whose_launch_was_never_heard_of_is_billed_to_its_attempt_when_swept(world, monkeypatch, crash):
    """The launch's answers were lost and so was the lookup by its token: the attempt ended with no instance, and
    the orphan sweep terminated the instance without billing anyone for it."""
    made = launches_made_but_unheard(world, monkeypatch)
    job_id = world.submit()
    for _ in range(7):  # past launch_timeout (300 s)
        world.tick(60)
    [made] = made
    assert world.attempts(job_id)[0].end_reason == "launch_error"
    if crash:  # the sweep dies right after the terminate: no later sweep sees the instance to bill it
        world.cloud.crash_after_terminate = True
        with pytest.raises(Crash):
            world.controller.sweep_orphans()
        world.controller = world.new_controller()
    world.controller.sweep_orphans()
    unheard = world.attempts(job_id)[0]
    assert world.cloud.instances[made].state == "terminated"
    assert unheard.instance_id == made and unheard.billed_seconds >= 300 and unheard.charged_seconds > 0


def test_an_orphan_left_on_a_cloud_no_live_job_uses_is_swept_after_a_restart(world, monkeypatch):
    """The sweep listed only the clouds this controller process had used: one restarted after the last job on a
    cloud ended never looked there again, and the orphan its launch left ran, unbilled, for good."""
    made = launches_made_but_unheard(world, monkeypatch)
    job_id = world.submit()
    for _ in range(7):  # past launch_timeout (300 s): the attempt ends, its instance unknown to it
        world.tick(60)
    jobs.request_cancel(world.store, job_id, world.clock.now())
    world.tick()
    assert world.job(job_id).state == "CANCELLED"
    [made] = made
    assert world.cloud.instances[made].state == "running", "no sweep has run since the attempt ended"
    world.controller = world.new_controller()  # restarted: its first tick sweeps
    world.tick()
    unheard = world.attempts(job_id)[0]
    assert world.cloud.instances[made].state == "terminated"
    assert unheard.instance_id == made and unheard.charged_seconds > 0


def test_a_cloud_that_cannot_be_swept_is_told_once_in_one_line_not_at_every_sweep(world, caplog, monkeypatch):
    """A cloud on record whose credentials are gone logged a full traceback at every sweep."""
    world.submit()
    world.tick()  # an attempt on record: its cloud is swept from now on
    credentials = {"gone": True}

    def providers(name):
        if credentials["gone"]:
            raise ValueError(f"no {name} credentials: the key file was removed")
        return world.cloud

    controller = Controller(world.store, world.controller.settings, clock=world.clock, provider_factory=providers,
                            prices=world.controller._prices)
    caplog.set_level("DEBUG", logger="spotrun.controller")

    def warnings():
        return [r for r in caplog.records if r.name == "spotrun.controller" and r.levelname == "WARNING"]

    for _ in range(3):
        controller.sweep_orphans()
    [warning] = warnings()
    assert "local" in warning.getMessage() and "the key file was removed" in warning.getMessage()
    assert warning.exc_info is None, "one line, not a traceback"
    credentials["gone"] = False
    controller.sweep_orphans()

    def refused():
        raise PermissionError("the role may no longer list instances")

    monkeypatch.setattr(world.cloud, "list_instances", refused)
    controller.sweep_orphans()
    assert len(warnings()) == 2, "failing again after it came back: told again"
    assert "may no longer list" in warnings()[1].getMessage()

def test_a_gpu_job_is_placed_only_in_zones_that_have_its_gpus(world, monkeypatch):
    """GCE attaches a GPU to a machine in only some of the machine's zones: the provider is asked with the job's
    accelerators, at launch and when spot is lost."""
    asked = []

    def zones(instance_type, accelerators=None):
        asked.append(accelerators)
        return ["m-b"] if accelerators == {"V100": 1} else ["m-a", "m-b", "m-c"]

    monkeypatch.setattr(world.cloud, "zones", zones)
    job_id = world.submit(SPEC_WITH_GPU)
    world.spot_lost_after(job_id, 600)
    world.tick()

    assert {attempt.zone for attempt in world.attempts(job_id)} == {"m-b"} and len(world.attempts(job_id)) == 2
    assert asked and all(accelerators == {"V100": 1} for accelerators in asked)


SPEC_WITH_GPU = """
name: gpu
run: "true"
resources: {cloud: local, instance_type: local.cpu, accelerators: {V100: 1}}
spot: {preemptions_before_fallback: 3}
"""


@pytest.mark.parametrize(("cloud", "apart"), [("gcp", True), ("aws", False)])
def test_gpus_attached_apart_from_the_machine_make_their_own_market(world, cloud, apart):
    """On GCE a V100 stockout in a zone says nothing of the same N1 machine without one; an EC2 type carries its
    GPUs, so the accelerators a job file names there change nothing."""
    text = f"""
run: "true"
resources: {{cloud: {cloud}, instance_type: n1-standard-8, {{gpus}} prices: {{on_demand: 3.0, spot: 1.0}}}}
spot: {{zones: [m-a, m-b, m-c]}}
"""
    with_gpu, without = text.replace("{gpus}", "accelerators: {V100: 1},"), text.replace("{gpus}", "")
    first_gpu_job, cpu_job = world.submit(with_gpu), world.submit(without)
    world.tick()
    second_gpu_job = world.submit(with_gpu)

    def seen_by(job_id: int) -> int:
        with world.store.session() as session:
            job = session.get(Job, job_id)
            return len(world.controller.market_tries(session, job, parse_spec(job_text[job_id]), world.clock.now()))

    job_text = {first_gpu_job: with_gpu, cpu_job: without, second_gpu_job: with_gpu}
    assert world.attempts(first_gpu_job) and world.attempts(cpu_job), "both were placed"
    assert seen_by(second_gpu_job) == (1 if apart else 2)  # the other GPU job's try (and the CPU job's, on EC2)
    assert seen_by(cpu_job) == (0 if apart else 1)
    assert world.attempts(first_gpu_job)[0].gpus == ("nvidia-tesla-v100x1" if apart else None)
