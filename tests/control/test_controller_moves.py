"""Make-before-break moves: a running job's policy says "run there instead"; the instance there is launched while the
job keeps running, and the running attempt is stopped only once the new one is up."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from sqlalchemy import select

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.control.observe import Verdict
from spotrun.control.placement import job_tries, market_attempts
from spotrun.control.states import JobState
from spotrun.policy import Keep, Launch, Wait
from spotrun.policy.observations import SpotLog
from spotrun.providers import LaunchInvalid, QuotaExceeded
from spotrun.server.views import attempt_views, job_row
from spotrun.spec import JobSpec
from spotrun.state import Event, Instance

from memory_cloud import Crash  # noqa: E402  (tests/control is on sys.path via conftest)
from world import DEADLINE_SPEC, SPEC, alive_for  # noqa: E402

def start_move(world, scripted, target=("m-b", "spot")):
    """Run the job's first attempt, then have its policy ask for `target`; the running attempt's instance."""
    job_id = world.submit(DEADLINE_SPEC)
    instance = world.run_to_running(job_id)
    scripted.answer = Launch(*target, "spot is back in m-b")
    alive_for(world, instance, 61)
    scripted.answer = Keep("fine")
    return job_id, instance


def standby_instance(world, job_id):
    return world.attempts(job_id)[1].instance_id


def events(world, job_id, kind):
    with world.store.session() as session:
        return [e.message for e in session.query(Event).filter_by(job_id=job_id, kind=kind).order_by(Event.id)]


def test_the_new_instance_runs_before_the_old_one_is_asked_to_stop(world, scripted):
    job_id, old = start_move(world, scripted)
    first, standby = world.attempts(job_id)
    assert not scripted.last_context.moves_drain_first  # the policy knows a refused try keeps the instance held
    assert standby.standby_for == first.id and (standby.zone, standby.market) == ("m-b", "spot")
    assert standby.instance_id is not None and first.state == "running"
    config = json.loads(world.cloud.user_data[standby.instance_id]["env"]["SPOTRUN_AGENT_CONFIG"])
    assert config["hold"] is True and config["attempt_id"] == standby.id
    assert world.agent(old)("heartbeat", {})["stop"] is None  # nothing is stopped for a machine that may not boot

    new = world.agent(standby.instance_id)
    new("started", {})
    assert new("heartbeat", {})["hold"] is True
    world.tick()
    assert "attempt 2 is up (spot in m-b)" in world.agent(old)("heartbeat", {})["stop"]
    assert world.job(job_id).state == "RUNNING"
    assert new("heartbeat", {})["hold"] is True  # the old trainer has not checkpointed yet

    world.agent(old)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    first, second = world.attempts(job_id)
    assert first.end_reason == "migrated" and second.ended_at is None
    assert new("heartbeat", {})["hold"] is False  # released: it restores the checkpoint just written
    world.tick()
    job = world.job(job_id)
    assert job.state == "RUNNING" and job.preemptions == 0 and job.restarts_on_error == 0
    assert [i.instance_id for i in world.cloud.running()] == [second.instance_id]
    assert len(world.attempts(job_id)) == 2  # the standby was the move: nothing else was launched
    assert any("takes over from attempt 1" in m for m in events(world, job_id, "move_taken_over"))


def test_a_standby_that_took_over_and_ended_between_two_ticks_ran_from_its_take_over(world, scripted):
    """Its agent reported in long before it took over: the job's move to RUNNING on it is dated at the take-over
    (not at its report, when the job still ran on the old attempt), and read before its end."""
    job_id, old = start_move(world, scripted)
    new = world.agent(standby_instance(world, job_id))
    new("started", {})
    world.tick(5)  # the old attempt is asked to stop
    world.agent(old)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick(5)  # it ends (migrated), and the standby takes over
    taken_over = world.clock.now()
    assert world.job(job_id).state == "PROVISIONING"
    new("exit", {"outcome": "failed", "exit_code": 3, "checkpoint_synced": True})
    world.tick(5)

    with world.store.session() as session:
        read = session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id)).all()
        standby_ended = next(i for i, e in enumerate(read) if e.kind == "attempt_ended" and "attempt 2 " in e.message)
        running = [(i, e.at) for i, e in enumerate(read) if e.kind == "state" and (e.data or {}).get("to") == "RUNNING"]
    assert running[-1][0] < standby_ended
    assert running[-1][1] == taken_over


def test_a_refused_launch_keeps_the_job_running_where_it_is(world, scripted):
    world.cloud.capacity["m-b"] = False
    job_id, old = start_move(world, scripted)
    first, refused = world.attempts(job_id)
    assert refused.end_reason == "no_capacity" and refused.billed_seconds == 0.0
    job = world.job(job_id)
    assert job.state == "RUNNING" and job.not_before is None and job.capacity_rounds == 0
    assert first.state == "running" and world.agent(old)("heartbeat", {})["stop"] is None
    asked = scripted.asked
    scripted.answer = Launch("m-b", "spot", "try again")
    alive_for(world, old, 61)
    assert scripted.asked == asked + 1 and len(world.attempts(job_id)) == 3  # the policy may try again


def test_the_policy_is_not_asked_again_while_a_standby_boots(world, scripted):
    job_id, old = start_move(world, scripted)
    asked = scripted.asked
    new = world.agent(standby_instance(world, job_id))
    new("started", {})
    for _ in range(3):  # 100 s since the policy was asked; the old attempt drains, within its grace
        new("heartbeat", {})
        alive_for(world, old, 15)
    assert scripted.asked == asked
    assert len(world.attempts(job_id)) == 2 and world.attempts(job_id)[0].state == "draining"


def test_a_standby_lost_before_it_took_over_leaves_the_job_where_it_runs(world, scripted):
    job_id, old = start_move(world, scripted)
    world.cloud.reclaim(standby_instance(world, job_id))
    world.agent(old)("heartbeat", {})
    world.tick()
    first, standby = world.attempts(job_id)
    assert standby.end_reason == "preempted" and first.state == "running"
    job = world.job(job_id)
    assert job.state == "RUNNING" and job.preemptions == 0
    assert "the job stays on it" in events(world, job_id, "move_abandoned")[0]


def test_a_standby_whose_agent_never_reports_is_ended_after_the_boot_timeout(world, scripted):
    job_id, old = start_move(world, scripted)
    alive_for(world, old, 80)
    first, standby = world.attempts(job_id)
    assert standby.end_reason == "lost" and first.state == "running"
    assert world.cloud.describe(standby.instance_id).state == "terminated"


def test_a_standby_given_a_notice_while_holding_ends_and_the_job_stays(world, scripted):
    job_id, old = start_move(world, scripted)
    new = world.agent(standby_instance(world, job_id))
    new("started", {})
    new("notice", {"source": "aws", "deadline": None})
    new("exit", {"outcome": "preempted", "exit_code": None, "checkpoint_synced": False})
    world.agent(old)("heartbeat", {})
    world.tick()
    first, standby = world.attempts(job_id)
    assert standby.end_reason == "preempted" and first.state == "running"
    assert world.agent(old)("heartbeat", {})["stop"] is None
    assert world.job(job_id).preemptions == 0


def test_when_the_old_instance_is_taken_first_the_standby_takes_over_without_a_new_launch(world, scripted):
    job_id, old = start_move(world, scripted)
    new = world.agent(standby_instance(world, job_id))
    new("started", {})
    world.cloud.reclaim(old)
    world.tick()
    first, standby = world.attempts(job_id)
    assert first.end_reason == "preempted" and standby.ended_at is None
    job = world.job(job_id)
    assert job.preemptions == 1 and job.state == JobState.PROVISIONING
    assert new("heartbeat", {})["hold"] is False
    world.tick()
    assert world.job(job_id).state == JobState.RUNNING and len(world.attempts(job_id)) == 2


@pytest.mark.parametrize("agent_reported_first", [True, False])
def test_an_instance_taken_while_it_stops_to_move_is_no_preemption_of_the_job(world, scripted, agent_reported_first):
    """The job had already chosen to leave: the cloud's reclaim of the instance it was leaving ended it "migrated" when
    the agent's report came first, but "preempted" when the instance was seen gone first, counted toward
    preemptions_before_fallback (on-demand for the fallback window) by the race between the two."""
    job_id, old = start_move(world, scripted)
    new = world.agent(standby_instance(world, job_id))
    new("started", {})
    world.tick()
    assert world.attempts(job_id)[0].state == "draining"
    world.agent(old)("notice", {"source": "aws-imds"})
    if agent_reported_first:
        world.agent(old)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.cloud.reclaim(old)
    world.tick()
    first, standby = world.attempts(job_id)
    assert first.end_reason == "migrated" and standby.ended_at is None
    assert world.job(job_id).preemptions == 0
    with world.store.session() as session:
        assert session.get(Instance, old).reclaimed is True  # still billed, and news, as the cloud's reclaim
    assert new("heartbeat", {})["hold"] is False
    world.tick()
    assert world.job(job_id).state == JobState.RUNNING and len(world.attempts(job_id)) == 2


@pytest.mark.parametrize(("notice", "reclaimed"), [(True, True), (False, True), (True, False)])
def test_an_instance_taken_while_it_stops_to_move_is_news_that_spot_went_there(world, scripted, notice, reclaimed):
    """Ended "migrated", the cloud's reclaim (or its notice of one) was read by every job's policy as spot lasting in
    that zone to the move: no spot lifetime ended, no reclaim counted there."""
    job_id, old = start_move(world, scripted)
    world.agent(standby_instance(world, job_id))("started", {})
    world.tick()
    if notice:
        world.agent(old)("notice", {"source": "aws-imds"})
        world.agent(old)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    if reclaimed:
        world.cloud.reclaim(old)
    world.tick()
    first = world.attempts(job_id)[0]
    assert first.end_reason == "migrated" and world.job(job_id).preemptions == 0
    other = world.job(world.submit(DEADLINE_SPEC))
    with world.store.session() as session:
        own = job_tries(session, job_id)
        market = market_attempts(session, other, JobSpec.stored(other.spec), world.clock.now(), 3600.0)
    for tries in (own, market):
        assert SpotLog.from_history(tries).zone(first.zone).lost_at == [first.ended_at]


@pytest.mark.parametrize(
    ("ending", "state"),
    [
        ({"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True}, "SUCCEEDED"),
        (None, "CANCELLED"),
    ],
)
def test_a_job_that_ends_while_a_standby_boots_ends_the_standby_too(world, scripted, ending, state):
    from spotrun.control import jobs

    job_id, old = start_move(world, scripted)
    world.agent(standby_instance(world, job_id))("started", {})
    if ending is None:
        jobs.request_cancel(world.store, job_id, world.clock.now())
    else:
        world.agent(old)("exit", ending)
    world.tick()
    job = world.job(job_id)
    assert job.state == state
    assert [a.ended_at is not None for a in job.attempts] == [True, True]
    assert job.attempts[1].end_reason == "cancelled" and world.cloud.running() == []


@pytest.mark.parametrize("workers", [(None, None), ("host:111:aaaa", "host:222:bbbb")])
def test_a_crash_between_the_jobs_end_and_its_standbys_is_cleaned_up_by_the_sweep(world, scripted, monkeypatch, workers):
    """As daemons run it, one of several workers (the second case): no worker holds an ended job's claim, and the
    sweep's end of the standby was refused as a stale worker's, every sweep, the standby's row never ended or billed."""
    first_worker, restarted = workers
    world.controller = world.new_controller(worker_id=first_worker)
    job_id, old = start_move(world, scripted)
    standby = standby_instance(world, job_id)

    def crash(standby_id):
        raise Crash()

    world.agent(old)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    monkeypatch.setattr(world.controller.moves, "drive", crash)
    with pytest.raises(Crash):
        world.tick()
    assert world.job(job_id).state == "SUCCEEDED" and world.cloud.describe(standby).state == "running"
    world.controller = world.new_controller(worker_id=restarted)  # restarted; its first tick sweeps
    world.tick()
    assert world.cloud.describe(standby).state == "terminated"
    [_, ended] = world.attempts(job_id)
    assert ended.end_reason == "cancelled" and ended.ended_at is not None


def test_a_crash_right_after_the_standbys_launch_does_not_launch_it_twice(world, scripted):
    job_id = world.submit(DEADLINE_SPEC)
    instance = world.run_to_running(job_id)
    scripted.answer = Launch("m-b", "spot", "spot is back")
    world.cloud.crash_after_launch = True
    with pytest.raises(Crash):
        alive_for(world, instance, 61)
    scripted.answer = Keep("fine")
    world.controller = world.new_controller()
    alive_for(world, instance, 1)
    first, standby = world.attempts(job_id)
    assert standby.instance_id is not None and standby.state == "running"
    assert len(world.cloud.instances) == 2  # the relaunch found the instance by its client token


def test_a_wait_answer_still_stops_the_instance(world, scripted):
    job_id = world.submit(DEADLINE_SPEC)
    instance = world.run_to_running(job_id)
    scripted.answer = Wait(world.clock.now() + 3600, "ahead of schedule: stop paying")
    alive_for(world, instance, 61)
    assert len(world.attempts(job_id)) == 1 and world.attempts(job_id)[0].state == "draining"
    assert "ahead of schedule" in world.agent(instance)("heartbeat", {})["stop"]


def test_the_views_show_where_the_job_runs_and_which_attempt_stands_by(world, scripted):
    job_id, old = start_move(world, scripted)
    job = world.job(job_id)
    first_zone = job.attempts[0].zone
    row = job_row(job, world.clock.now())
    assert (row.market, row.zone) == ("spot", first_zone)  # where it runs, not where it is going
    views = attempt_views(job.attempts, world.clock.now())
    assert (views[1].state, views[1].takes_over_from) == ("standby", 1)
    assert views[0].takes_over_from is None and views[0].state == "running"
    # the detail reads them as rows; it prices the running ones as of the wall clock's now, not the test's
    read = EmbeddedBackend(world.store).detail(job_id).attempts
    assert [v.model_dump(exclude={"cost"}) for v in read] == [v.model_dump(exclude={"cost"}) for v in views]



def test_a_job_without_a_deadline_that_fell_back_to_on_demand_returns_to_spot_make_before_break(world):
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 1d"))  # default policy, 3 preemptions to fall back
    for _ in range(3):
        world.cloud.reclaim(world.run_to_running(job_id))
        world.tick()
    on_demand = world.run_to_running(job_id)
    assert world.attempts(job_id)[-1].market == "on-demand"
    alive_for(world, on_demand, 3000)
    assert world.attempts(job_id)[-1].market == "on-demand"  # held for the fallback window first
    alive_for(world, on_demand, 640)
    held, standby = world.attempts(job_id)[-2:]
    assert (standby.market, standby.standby_for, held.state) == ("spot", held.id, "running")
    assert "trying spot" in events(world, job_id, "move_started")[0]
    world.agent(standby.instance_id)("started", {})
    world.tick()
    world.agent(on_demand)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    world.tick()
    job = world.job(job_id)
    assert job.state == "RUNNING" and job.attempts[-2].end_reason == "migrated"
    assert [i.instance_id for i in world.cloud.running()] == [standby.instance_id]


def test_a_standby_the_cloud_refuses_after_accepting_it_holds_back_only_moves_there(world, scripted):
    """Azure accepts a VM, then fails its allocation (the VM's refusal, read by describe): ended "no_capacity" as a
    refused launch is, it held back every move for the boot timeout, as a standby that held an instance does."""
    world.controller = world.new_controller(boot_timeout=600)
    job_id, old = start_move(world, scripted, target=("m-b", "spot"))
    refused = standby_instance(world, job_id)
    failed = {"refusal": "no_capacity", "reason": "ZonalAllocationFailed"}
    world.cloud.instances[refused] = replace(world.cloud.instances[refused], state="terminated", detail=failed)
    alive_for(world, old, 1)
    assert world.attempts(job_id)[1].end_reason == "no_capacity"
    scripted.answer = Launch("m-c", "spot", "spot in m-c")
    alive_for(world, old, 61)
    assert [(a.zone, a.ended_at) for a in world.attempts(job_id)[2:]] == [("m-c", None)]


def test_after_a_standby_is_lost_the_next_move_waits_and_the_wait_doubles(world, scripted):
    job_id, old = start_move(world, scripted)
    scripted.answer = Launch("m-b", "spot", "spot is back in m-b")  # and its standbys never report in
    alive_for(world, old, 1200)
    with world.store.session() as session:
        times = {kind: [e.at for e in session.query(Event).filter_by(job_id=job_id, kind=kind).order_by(Event.id)]
                 for kind in ("move_started", "move_abandoned")}
    started, abandoned = times["move_started"], times["move_abandoned"]
    assert len(started) >= 4 and len(abandoned) >= 3
    for n, (gave_up, next_try) in enumerate(zip(abandoned, started[1:])):
        wait = 60.0 * 2**n  # the boot timeout (60 s here), doubling
        assert wait <= next_try - gave_up <= wait + 60 + 20  # then at the next reconsider (60 s), in 20 s ticks
    assert world.attempts(job_id)[0].state == "running"


def test_a_standby_launched_but_not_recorded_is_found_by_its_token_terminated_and_billed_when_the_job_ends(
    world, scripted, monkeypatch
):
    """The cloud launched the standby but the answer was lost (a timeout; a controller that died before recording
    it), and the job ended before a tick launched it again by its token: the instance ran on, billed 0 s, until
    the orphan sweep."""
    from spotrun.state import Attempt, Instance

    real_launch, lose = world.cloud.launch, []

    def launch_and_lose_the_answer(request):
        info = real_launch(request)
        if lose:
            lose.clear()
            raise TimeoutError("the launch call timed out (the cloud did launch)")
        return info

    monkeypatch.setattr(world.cloud, "launch", launch_and_lose_the_answer)
    scripted.answer = Keep("fine")
    job_id = world.submit(DEADLINE_SPEC)
    held = world.run_to_running(job_id)
    scripted.answer, lose[:] = Launch("m-b", "on-demand", "move"), [True]
    for _ in range(20):
        world.agent(held)("heartbeat", {})
        world.tick(5)
        if len(world.cloud.instances) == 2:
            break
    scripted.answer = Keep("fine")
    [standby] = [i for i in world.cloud.instances.values() if i.instance_id != held]
    assert [a.instance_id for a in world.attempts(job_id)] == [held, None]  # launched, not on record
    world.agent(held)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick(5)

    assert world.job(job_id).state == "SUCCEEDED"
    assert world.cloud.describe(standby.instance_id).state == "terminated"
    with world.store.session() as session:
        attempt = session.query(Attempt).filter_by(job_id=job_id, number=2).one()
        assert attempt.instance_id == standby.instance_id and attempt.billed_seconds > 0
        assert session.get(Instance, standby.instance_id) is not None


def test_two_workers_sweeping_one_leftover_end_it_once(world, scripted, monkeypatch):
    job_id, old = start_move(world, scripted)
    world.agent(old)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    monkeypatch.setattr(world.controller.moves, "drive", lambda standby_id: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        world.tick()
    first, second = world.new_controller(worker_id="w1"), world.new_controller(worker_id="w2")
    leftover = world.attempts(job_id)[1].id
    for worker in (first, second):  # both read it as open before either marked it
        worker.begin_end(leftover, Verdict("cancelled", "not needed: the job has ended"), fenced=False)
    for worker in (first, second):
        worker.finish_attempt(leftover, lambda session, attempt, now: None, fenced=False)
    with world.store.session() as session:
        kinds = [e.kind for e in session.scalars(select(Event).where(Event.attempt_id == leftover))]
    assert kinds.count("attempt_ending") == 1 and kinds.count("attempt_ended") == 1
    assert world.attempts(job_id)[1].ended_at is not None


def test_a_job_that_finishes_as_it_stops_to_move_succeeds_and_its_standby_is_given_back(world, scripted):
    """Its command ended 0 after the stop (the run's last step was done): the attempt ended "migrated", and the
    standby took over and ran the finished job again."""
    job_id, old = start_move(world, scripted)
    standby = standby_instance(world, job_id)
    world.agent(standby)("started", {})
    world.tick()
    assert world.attempts(job_id)[0].state == "draining"
    world.agent(old)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick()
    world.tick()
    job = world.job(job_id)
    assert job.state == "SUCCEEDED" and [a.end_reason for a in job.attempts] == ["succeeded", "cancelled"]
    assert world.cloud.running() == []


def test_a_standby_whose_launch_no_retry_mends_is_given_up_and_the_job_runs_on(world, scripted, monkeypatch):
    """The job failed, its own instance left running (its attempt open) for the next sweep: a launch refused as
    invalid for the move's placement (a subnet missing in that zone) is no reason to end a job that runs."""
    launch = world.cloud.launch

    def no_subnet_in_m_b(request):
        if request.zone == "m-b":
            raise LaunchInvalid("InvalidSubnetID.NotFound: the subnet 'subnet-0b' does not exist")
        return launch(request)

    monkeypatch.setattr(world.cloud, "launch", no_subnet_in_m_b)
    job_id, old = start_move(world, scripted)
    first, refused = world.attempts(job_id)
    assert refused.end_reason == "launch_invalid" and refused.billed_seconds == 0.0
    job = world.job(job_id)
    assert job.state == "RUNNING" and job.failure_reason is None
    assert first.state == "running" and world.agent(old)("heartbeat", {})["stop"] is None
    assert [i.instance_id for i in world.cloud.running()] == [old]


@pytest.mark.parametrize("refusal", [QuotaExceeded("spot vCPU quota reached"), LaunchInvalid("no subnet in m-b")])
def test_a_standby_refused_again_and_again_is_tried_less_and_less_often_there(world, scripted, monkeypatch, refusal):
    """Refusals its policy is not told of (a quota, a launch no retry mends) were tried again at every reconsider,
    60 s, for as long as the job ran: a launch call and an attempt row a minute."""
    launch = world.cloud.launch

    def refused_in_m_b(request):
        if request.zone == "m-b":
            raise refusal
        return launch(request)

    monkeypatch.setattr(world.cloud, "launch", refused_in_m_b)
    job_id, old = start_move(world, scripted, target=("m-b", "spot"))
    scripted.answer = Launch("m-b", "spot", "m-b again")
    alive_for(world, old, 1800)
    tries = [a.created_at for a in world.attempts(job_id) if a.standby_for is not None]
    assert len(tries) <= 6, len(tries)  # not 31
    for n, (refused, next_try) in enumerate(zip(tries, tries[1:])):
        wait = 60.0 * 2**n  # reconsider_every (60 s), doubling
        assert wait <= next_try - refused <= wait + 60 + 20, (n, next_try - refused)
    assert world.attempts(job_id)[0].state == "running"

    # m-c: not held back by m-b's quota; by a launch no retry mends, only until the wait after the last refusal
    scripted.answer = Launch("m-c", "spot", "spot in m-c")
    alive_for(world, old, 61)
    standby = world.attempts(job_id)[-1]
    assert (standby.zone, standby.instance_id is not None, standby.ended_at) == ("m-c", True, None)
