"""The clouds' billing rules in the controller: minimums, and a spot instance interrupted in its first hour left for
the cloud to take back, which AWS then charges nothing for (`control/reclaims.py`, `costs/billing.py`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from world import SPEC

from spotrun.costs import ledger
from spotrun.costs.billing import CLOUD_RULES
from spotrun.server.fleet_totals import fleet_bill
from spotrun.state import Event, Instance, Job

AWS_RULES = {"local": CLOUD_RULES["aws"]}  # the world's jobs run on the `local` cloud: billed here as EC2 bills
# Hours pass in single ticks here: a heartbeat every 30 s over them would only make the tests slow.
PATIENT = {"heartbeat_timeout": 4 * 3600.0, "boot_timeout": 4 * 3600.0}


@pytest.fixture
def aws_world(world):
    world.controller = world.new_controller(billing_rules=AWS_RULES, **PATIENT)
    return world


def alive_for(world, instance: str, seconds: float) -> None:
    world.agent(instance)("heartbeat", {})
    world.tick(seconds)


def interrupted_after(
    world, seconds: float, source: str = "aws-imds", deadline_in: float | None = None
) -> tuple[int, str]:
    """A job on spot for `seconds`, then the cloud's interruption notice (stating the reclaim `deadline_in` seconds
    later, or no time): its trainer saves and stops."""
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    alive_for(world, instance, seconds)
    deadline = world.clock.now() + deadline_in if deadline_in is not None else None
    world.agent(instance)("notice", {"source": source, "deadline": deadline})
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    return job_id, instance


def instance_row(world, instance_id: str) -> Instance:
    with world.store.session() as session:
        return session.get(Instance, instance_id)


def events(world, kind: str) -> list[Event]:
    with world.store.session() as session:
        return list(session.query(Event).filter(Event.kind == kind))


def test_an_instance_interrupted_in_its_first_hour_is_left_to_the_cloud_and_charged_nothing_once_taken(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 1200)
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "preempted" and world.job(job_id).state in ("PREEMPTED", "PROVISIONING")
    assert world.cloud.instances[first].state == "running", "spotrun terminated it itself: EC2 would charge it"
    assert instance_row(world, first).state == "awaiting_reclaim"
    world.tick()
    [_, second] = world.attempts(job_id)  # the job moves on while the old instance waits
    world.agent(second.instance_id)("started", {})
    alive_for(world, second.instance_id, 100)
    world.cloud.reclaim(first)
    world.tick()
    [attempt, second] = world.attempts(job_id)
    assert instance_row(world, first).state == "terminated" and instance_row(world, first).reclaimed
    assert attempt.billed_seconds == pytest.approx(attempt.ended_at - attempt.started_at + 101)
    assert attempt.charged_seconds == 0.0
    assert ledger.attempt_cost(attempt, world.clock.now()) == 0.0
    [settled] = events(world, "instance_settled")
    assert settled.data["reclaimed"] and "0 s charged" in settled.message
    assert world.cloud.instances[second.instance_id].state == "running"


def test_an_instance_interrupted_after_its_first_hour_is_terminated_at_once_and_charged(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 3500)  # EC2 takes it 2 min after the notice: past the first hour
    [attempt, *_] = world.attempts(job_id)
    assert world.cloud.instances[first].state == "terminated" and instance_row(world, first).state == "terminated"
    assert attempt.charged_seconds == pytest.approx(attempt.billed_seconds) and attempt.billed_seconds > 3500
    assert events(world, "instance_left_to_cloud") == []


def test_a_notice_the_cloud_does_not_keep_is_released_at_its_time_and_charged(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 600)
    notice_at = world.attempts(job_id)[0].notice_at
    release_at = instance_row(world, first).release_at
    assert release_at == pytest.approx(notice_at + 120 + 60, abs=0.01)
    while world.clock.now() + 20 < release_at:
        world.tick(20)
        assert world.cloud.instances[first].state == "running"
    world.tick(release_at - world.clock.now() - 1)
    assert world.cloud.instances[first].state == "running"
    world.tick(2)
    [attempt, *_] = world.attempts(job_id)
    assert world.cloud.instances[first].state == "terminated" and not instance_row(world, first).reclaimed
    assert attempt.billed_seconds == pytest.approx(world.clock.now() - attempt.started_at)
    assert attempt.charged_seconds == pytest.approx(attempt.billed_seconds)
    [settled] = events(world, "instance_settled")
    assert not settled.data["reclaimed"] and "did not take it back" in settled.message


def test_the_release_time_follows_the_reclaim_time_the_notice_stated(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 600, deadline_in=75)  # the agent saw EC2's notice 45 s late
    [attempt, *_] = world.attempts(job_id)
    assert attempt.reclaim_at == pytest.approx(attempt.notice_at + 75, abs=0.01)
    assert instance_row(world, first).release_at == pytest.approx(attempt.reclaim_at + 60, abs=0.01)


def test_a_notice_seen_late_near_the_first_hours_end_is_still_left_to_the_cloud(aws_world):
    # EC2 said it takes the instance at 3,590 s; the agent saw the notice at 3,560 s. The lead after the notice
    # (3,680 s) would be past the free hour, and terminating it at once would pay for all of it.
    world = aws_world
    job_id, first = interrupted_after(world, 3560, deadline_in=30)
    assert instance_row(world, first).state == "awaiting_reclaim"
    world.cloud.reclaim(first)
    world.tick()
    assert world.attempts(job_id)[0].charged_seconds == 0.0


def test_a_notice_stating_a_reclaim_past_the_first_hour_is_terminated_at_once(aws_world):
    # By the lead the cloud would take it at 3,120 s, in the free hour; but its notice says 3,650 s: not free.
    world = aws_world
    job_id, first = interrupted_after(world, 3000, deadline_in=650)
    assert world.cloud.instances[first].state == "terminated"
    assert events(world, "instance_left_to_cloud") == []
    [attempt, *_] = world.attempts(job_id)
    assert attempt.charged_seconds == pytest.approx(attempt.billed_seconds)


@pytest.mark.parametrize("deadline", [-5.0, 0.0, "soon", "NaN"])
def test_a_notice_with_a_bad_deadline_is_refused_and_changes_nothing(aws_world, deadline):
    world = aws_world
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    with pytest.raises(AssertionError, match="deadline"):  # the agent API's 422 names the field
        world.agent(instance)("notice", {"source": "aws-imds", "deadline": deadline})
    [attempt] = world.attempts(job_id)
    assert attempt.notice_at is None and attempt.reclaim_at is None


def test_the_orphan_sweep_leaves_an_instance_awaiting_reclaim_alone(aws_world):
    world = aws_world
    _, first = interrupted_after(world, 600)
    world.controller.sweep_orphans()
    assert world.cloud.instances[first].state == "running"


def test_a_controller_that_restarts_settles_what_its_predecessor_left(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 600)
    world.controller = world.new_controller(billing_rules=AWS_RULES, **PATIENT)
    world.clock.advance(60)
    world.cloud.reclaim(first)
    world.tick()
    assert world.attempts(job_id)[0].charged_seconds == 0.0
    world.controller.tick()  # settled once: a second look finds nothing to do
    assert len(events(world, "instance_settled")) == 1


@pytest.mark.parametrize("source", ["controller", "sigterm", "test"])
def test_only_the_clouds_own_notice_leaves_an_instance_to_it(aws_world, source):
    world = aws_world
    _, first = interrupted_after(world, 600, source=source)
    assert world.cloud.instances[first].state == "terminated"
    assert events(world, "instance_left_to_cloud") == []


def test_a_spot_instance_the_cloud_took_without_a_notice_in_its_first_hour_is_charged_nothing(aws_world):
    world = aws_world
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 900)
    world.cloud.reclaim(instance)
    world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "preempted" and attempt.billed_seconds > 900 and attempt.charged_seconds == 0.0


def test_a_short_attempt_is_charged_the_clouds_minimum(aws_world):
    world = aws_world
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
    world.tick(5)
    [attempt] = world.attempts(job_id)
    assert attempt.billed_seconds < 60 and attempt.charged_seconds == 60.0


def test_on_the_local_cloud_every_held_second_is_charged_and_nothing_is_left_to_it(world):
    world.controller = world.new_controller(**PATIENT)
    job_id, first = interrupted_after(world, 600)
    [attempt, *_] = world.attempts(job_id)
    assert world.cloud.instances[first].state == "terminated"
    assert attempt.charged_seconds == pytest.approx(attempt.billed_seconds)


def test_the_job_bill_and_the_fleet_totals_count_what_was_charged(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 1200)
    world.tick()
    second = world.attempts(job_id)[1].instance_id
    world.agent(second)("started", {})
    alive_for(world, second, 60)
    world.cloud.reclaim(first)
    alive_for(world, second, 300)
    now = world.clock.now()
    job = world.job(job_id)
    bill = ledger.bill(job.placed_attempts, now)
    [free, running] = job.placed_attempts
    assert bill.cost == pytest.approx(ledger.held_seconds(running, now) / 3600 * running.price_per_hour)
    assert bill.on_demand_cost == pytest.approx(
        sum(ledger.held_seconds(a, now) / 3600 * a.on_demand_price_per_hour for a in (free, running)))
    with world.store.session() as session:
        totals = fleet_bill(session, now)
    assert totals.cost == pytest.approx(bill.cost) and totals.on_demand_cost == pytest.approx(bill.on_demand_cost)


def test_two_workers_settling_one_instance_bill_it_once(aws_world):
    from spotrun.control import reclaims

    world = aws_world
    _, first = interrupted_after(world, 600)
    other = world.new_controller(billing_rules=AWS_RULES, **PATIENT)
    world.cloud.reclaim(first)
    release_at = instance_row(world, first).release_at
    for controller in (world.controller, other):  # both read the instance as waiting before either settled it
        reclaims._settle(controller, first, "local", release_at, world.clock.now())
    assert len(events(world, "instance_settled")) == 1


def test_status_shows_what_was_charged_beside_the_seconds_held(aws_world):
    from io import StringIO

    from rich.console import Console

    from spotrun.cli.views import attempts_table
    from spotrun.server.views import attempt_views

    world = aws_world
    job_id, first = interrupted_after(world, 1200)
    world.cloud.reclaim(first)
    world.tick()
    [free, *_] = world.attempts(job_id)
    console = Console(width=250, file=StringIO(), record=True)
    console.print(attempts_table(attempt_views(world.attempts(job_id), world.clock.now()), job_id, world.clock.now()))
    [row] = [line for line in console.export_text().splitlines() if first in line]
    assert f"{free.billed_seconds:,.0f} (0 charged)" in row and "$0.0000" in row  # 1,2xx s: thousands grouped
    assert attempt_views([free], world.clock.now())[0].charged_seconds == 0.0


def test_a_charge_the_cloud_may_still_waive_is_marked_provisional_until_settled(aws_world):
    from io import StringIO

    from rich.console import Console

    from spotrun.cli.formats import clock_time
    from spotrun.cli.views import attempts_table, provisional_note
    from spotrun.server.views import job_cost, job_detail

    world = aws_world
    job_id, first = interrupted_after(world, 1200)
    release_at = instance_row(world, first).release_at

    def read() -> tuple:
        now = world.clock.now()
        with world.store.session() as session:
            job = session.get(Job, job_id)
            return job_detail(session, job, now), job_cost(session, job, now)

    detail, cost = read()
    [left, *_] = detail.attempts
    assert left.left_to_cloud_until == pytest.approx(release_at) and left.cost > 0
    assert [a.left_to_cloud_until for a in detail.attempts[1:]] == [None] * (len(detail.attempts) - 1)
    assert detail.bill.provisional == pytest.approx(left.cost) and cost.bill.provisional == pytest.approx(left.cost)
    assert detail.bill.provisional_until == pytest.approx(release_at)
    assert provisional_note(cost.bill) == (
        f"${left.cost:.4f} of it is provisional: instances left for the cloud to take back, free if it does by "
        f"{clock_time(release_at)}, charged to then if not"
    )
    console = Console(width=250, file=StringIO(), record=True)
    console.print(attempts_table(detail.attempts, job_id, world.clock.now()))
    [row] = [line for line in console.export_text().splitlines() if first in line]
    assert f"(free if the cloud takes it back by {clock_time(release_at)})" in row

    world.cloud.reclaim(first)
    world.tick()
    detail, cost = read()
    assert detail.attempts[0].left_to_cloud_until is None and detail.attempts[0].cost == 0.0
    assert (cost.bill.provisional, cost.bill.provisional_until) == (0.0, None)
    assert provisional_note(cost.bill) is None


def test_the_clouds_notice_while_stopping_to_move_still_leaves_the_instance_to_it(aws_world):
    """The move's stop had set the attempt's notice: the cloud's was dropped, and spotrun terminated the instance
    itself, charged in full (20 minutes of spot) where EC2 would have taken it back free."""
    world = aws_world
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 1200)
    [attempt] = world.attempts(job_id)
    world.controller.request_move(attempt.id, "a better zone")
    assert world.attempts(job_id)[0].state == "draining"
    world.agent(instance)("notice", {"source": "controller", "deadline": world.clock.now() + 30})  # the stop, answered
    world.agent(instance)("notice", {"source": "aws-imds", "deadline": world.clock.now() + 120})  # then EC2's
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()

    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "migrated" and attempt.notice_source == "aws-imds"
    assert world.cloud.instances[instance].state == "running" and instance_row(world, instance).state == "awaiting_reclaim"
    assert [e.message for e in events(world, "preemption_notice")] == [
        "attempt 1: preemption notice from aws-imds, 120 s left"]
    world.cloud.reclaim(instance)
    world.tick()
    assert world.attempts(job_id)[0].charged_seconds == 0.0


def test_a_move_asked_after_the_clouds_notice_keeps_that_notice(aws_world):
    world = aws_world
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 1200)
    world.agent(instance)("notice", {"source": "aws-imds", "deadline": world.clock.now() + 120})
    [attempt] = world.attempts(job_id)
    world.controller.request_move(attempt.id, "idle a while")  # the policy's next look, before the agent's exit
    with world.store.session() as session:
        from spotrun.control import records
        from spotrun.state import Attempt
        records.ask_to_stop(session, session.get(Attempt, attempt.id), "a gang's stop", world.clock.now())
    [attempt] = world.attempts(job_id)
    assert attempt.notice_source == "aws-imds"
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    assert instance_row(world, instance).state == "awaiting_reclaim"


def test_an_instance_the_cloud_forgot_during_an_outage_is_charged_at_most_to_its_release(aws_world):
    """Settled as gone "now", after the controller was down three hours: charged 11,522 s of spot."""
    world = aws_world
    job_id, first = interrupted_after(world, 600)
    release_at = instance_row(world, first).release_at
    world.clock.advance(3 * 3600)  # the controller is down; EC2 takes the instance back, then forgets it
    world.cloud.forget(first)
    world.controller = world.new_controller(billing_rules=AWS_RULES, **PATIENT)
    world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert instance_row(world, first).state == "terminated"
    assert attempt.billed_seconds == pytest.approx(release_at - attempt.started_at)
    assert attempt.charged_seconds == pytest.approx(attempt.billed_seconds) and attempt.billed_seconds < 800


def test_an_instance_alive_past_its_release_is_charged_to_when_spotrun_ends_it(aws_world):
    world = aws_world
    job_id, first = interrupted_after(world, 600)
    world.clock.advance(3600)  # the controller is down, and EC2 never took the instance
    world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert world.cloud.instances[first].state == "terminated" and not instance_row(world, first).reclaimed
    assert attempt.billed_seconds == pytest.approx(world.clock.now() - attempt.started_at, abs=2)


def test_a_lost_instance_the_cloud_no_longer_lists_is_billed_to_its_heartbeat_timeout(aws_world):
    """Ended "now" after a three-hour outage: 12,621 s charged for an instance last heard of at 1,200 s. Billed to
    its last sign of life, it was billed less than it may have run unheard before it was due as lost."""
    world = aws_world
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 12h"))  # the outage does not end the job
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 1200)
    world.agent(instance)("heartbeat", {})
    last_heard = world.clock.now()
    world.clock.advance(3 * 3600)
    world.cloud.forget(instance)
    world.controller = world.new_controller(billing_rules=AWS_RULES, heartbeat_timeout=60.0, unknown_timeout=60.0)
    for _ in range(3):  # the restarted controller gives the silent instance its timeout first
        world.tick(61)
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "lost"
    assert attempt.ended_at == last_heard + 60.0 and attempt.billed_seconds < 1300


def test_an_instance_gone_without_a_stated_end_during_an_outage_is_billed_to_its_heartbeat_timeout(world):
    """Azure forgets a spot VM it evicted with the Delete policy: gone, no end stated. It was billed to when the
    controller came back: 11,400 s for an instance last heard of at 600 s."""
    job_id = world.submit(SPEC.replace("max_wait: 2h", "max_wait: 12h"))  # the outage does not end the job
    instance = world.run_to_running(job_id)
    world.clock.advance(600)
    world.agent(instance)("heartbeat", {})
    last_heard = world.clock.now()
    world.clock.advance(3 * 3600)  # the controller is down; the cloud takes the instance and forgets when
    world.cloud.instances[instance] = replace(
        world.cloud.instances[instance], state="terminated", reclaimed=True, terminated_at=None)
    world.controller = world.new_controller(heartbeat_timeout=45.0)
    world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "preempted"
    assert attempt.ended_at == last_heard + 45.0  # it may have run unheard until it was due as lost
    assert attempt.billed_seconds == pytest.approx(last_heard + 45.0 - attempt.started_at, abs=1e-6)
    assert instance_row(world, instance).terminated_at == last_heard + 45.0


def stamped_anew_by_terminate(world, monkeypatch) -> None:
    """A cloud whose terminate of an instance that had already ended stamps a new end: EC2 terminating a stopped
    instance writes "User initiated (<now>)" over the stop's time; Azure deleting a deallocated VM starts a new
    provisioning state."""
    real_terminate = world.cloud.terminate

    def terminate(instance_id):
        real_terminate(instance_id)
        info = world.cloud.instances[instance_id]
        world.cloud.instances[instance_id] = replace(info, terminated_at=world.clock.now())

    monkeypatch.setattr(world.cloud, "terminate", terminate)


def test_an_instance_the_cloud_ended_during_an_outage_is_billed_to_the_clouds_end(world, monkeypatch):
    """The end was read after spotrun's own terminate: an instance the cloud had ended an hour before the controller
    came back was billed the hour, to when spotrun terminated it."""
    world.controller = world.new_controller(**PATIENT)
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 600)
    world.cloud.reclaim(instance)  # as the controller is down
    taken_at = world.clock.now()
    stamped_anew_by_terminate(world, monkeypatch)
    world.clock.advance(3600)
    world.controller = world.new_controller(**PATIENT)
    world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert attempt.end_reason == "preempted"
    assert attempt.ended_at == taken_at and attempt.billed_seconds == taken_at - attempt.started_at
    assert instance_row(world, instance).terminated_at == taken_at


@pytest.mark.parametrize("told", ["before its start", "after now"])
def test_the_clouds_end_is_billed_within_the_attempts_start_and_now(world, told):
    """An end the cloud states outside what spotrun saw (its clock and the cloud's disagree) bills neither a negative
    time nor seconds that have not passed."""
    world.controller = world.new_controller(**PATIENT)
    job_id = world.submit()
    instance = world.run_to_running(job_id)
    alive_for(world, instance, 600)
    started_at = world.attempts(job_id)[0].started_at
    stated = started_at - 30 if told == "before its start" else world.clock.now() + 1800
    world.cloud.instances[instance] = replace(
        world.cloud.instances[instance], state="terminated", reclaimed=True, terminated_at=stated)
    world.tick()
    [attempt, *_] = world.attempts(job_id)
    assert started_at <= attempt.ended_at <= world.clock.now()
    assert 0 <= attempt.billed_seconds <= world.clock.now() - started_at
