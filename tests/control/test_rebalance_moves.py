"""Early warnings in the controller (`control/rebalance.py`): each is recorded; with `spot.on_rebalance: move`, an
EC2 rebalance recommendation moves the job make-before-break to spot in another zone, once per attempt."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console
from world import SPEC

from spotrun.cli.views import attempts_table

from spotrun.server.views import attempt_views
from spotrun.state import Event

MOVE = SPEC.replace("spot: {", "spot: {on_rebalance: move, ")
REBALANCE = {"source": "aws-imds", "kind": "rebalance", "detail": "EC2 rebalance recommendation", "at": 1.7e9}


def running(world, spec: str = SPEC) -> tuple[int, str]:
    job_id = world.submit(spec)
    return job_id, world.run_to_running(job_id)


def events(world, kind: str) -> list[Event]:
    with world.store.session() as session:
        return list(session.query(Event).filter(Event.kind == kind).order_by(Event.id))


def beat(world, instance: str, ticks: int = 1) -> None:
    for _ in range(ticks):
        world.agent(instance)("heartbeat", {})
        world.tick()


def test_a_warning_is_kept_on_the_attempt_and_each_is_an_event(world):
    job_id, instance = running(world)
    world.agent(instance)("warning", REBALANCE)
    world.agent(instance)("warning", {"source": "aws-imds", "kind": "other", "detail": "later"})
    [attempt] = world.attempts(job_id)
    assert attempt.warning == "aws-imds/rebalance" and attempt.warned_at == pytest.approx(world.clock.now(), abs=1e-6)
    assert attempt_views([attempt], world.clock.now())[0].warning == "aws-imds/rebalance"  # the API's attempts
    first, second = events(world, "early_warning")
    assert first.data["kind"] == "rebalance" and "not a preemption notice" in first.message
    assert second.data["detail"] == "later"


def test_a_warning_of_spot_risk_after_another_is_the_one_kept(world):
    job_id, instance = running(world, MOVE)
    world.agent(instance)("warning", {"source": "azure-scheduled-events", "kind": "Freeze", "detail": "a freeze"})
    world.tick()
    world.agent(instance)("warning", REBALANCE)
    [attempt] = world.attempts(job_id)
    assert attempt.warning == "aws-imds/rebalance"
    world.agent(instance)("warning", {"source": "aws-imds", "kind": "other", "detail": "later"})
    assert world.attempts(job_id)[0].warning == "aws-imds/rebalance"
    beat(world, instance)
    assert len(world.attempts(job_id)) == 2  # and the move acts on it


def test_by_default_a_rebalance_recommendation_moves_nothing(world):
    job_id, instance = running(world)
    world.agent(instance)("warning", REBALANCE)
    beat(world, instance, 3)
    assert len(world.attempts(job_id)) == 1 and events(world, "move_started") == []


def test_with_move_the_job_moves_to_spot_in_another_zone_before_the_interruption(world):
    job_id, instance = running(world, MOVE)
    zone = world.attempts(job_id)[0].zone
    world.agent(instance)("warning", REBALANCE)
    beat(world, instance)
    first, standby = world.attempts(job_id)
    assert (standby.standby_for, standby.market) == (first.id, "spot") and standby.zone != zone
    [started] = events(world, "move_started")
    assert f"rebalancing away from {zone}" in started.message
    world.agent(standby.instance_id)("started", {"address": "127.0.0.1"})
    beat(world, instance)
    assert world.attempts(job_id)[0].state == "draining"  # the trainer is asked to checkpoint and stop
    world.agent(instance)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    first, second = world.attempts(job_id)
    assert first.end_reason == "migrated" and second.ended_at is None and second.zone != zone
    beat(world, second.instance_id, 3)
    assert len(world.attempts(job_id)) == 2  # the new attempt had no warning: it stays
    console = Console(width=250, file=StringIO(), record=True)
    console.print(attempts_table(attempt_views(world.attempts(job_id), world.clock.now()), job_id, world.clock.now()))
    rows = [line for line in console.export_text().splitlines() if f" {zone} " in line]
    assert len(rows) == 1 and "migrated, warned: rebalance" in rows[0]  # what `spotrun status JOB` shows


def test_a_refused_move_is_not_tried_again_for_the_same_attempt(world):
    job_id, instance = running(world, MOVE)
    zone = world.attempts(job_id)[0].zone
    for other in world.cloud.capacity:
        world.cloud.capacity[other] = other == zone
    world.agent(instance)("warning", REBALANCE)
    beat(world, instance, 5)
    first, refused = world.attempts(job_id)
    assert refused.end_reason == "no_capacity" and first.ended_at is None
    assert len(events(world, "move_started")) == 1


@pytest.mark.parametrize("warning", [
    {"source": "gcp-metadata", "kind": "maintenance MIGRATE_ON_HOST_MAINTENANCE", "detail": "live migration"},
    {"source": "azure-scheduled-events", "kind": "Freeze", "detail": "a freeze"},
])
def test_warnings_that_are_not_about_spot_risk_move_nothing(world, warning):
    job_id, instance = running(world, MOVE)
    world.agent(instance)("warning", warning)
    beat(world, instance, 3)
    assert len(world.attempts(job_id)) == 1


def test_a_warning_after_the_notice_moves_nothing(world):
    job_id, instance = running(world, MOVE)
    world.agent(instance)("notice", {"source": "aws-imds", "deadline": world.clock.now() + 120})
    world.agent(instance)("warning", REBALANCE)
    beat(world, instance, 2)
    assert events(world, "move_started") == []


def test_a_job_with_one_zone_has_nowhere_to_move(world):
    job_id, instance = running(world, MOVE.replace("zones: [m-a, m-b, m-c]", "zones: [m-b]"))
    world.agent(instance)("warning", REBALANCE)
    beat(world, instance, 3)
    assert len(world.attempts(job_id)) == 1


@pytest.mark.parametrize("body", [{"source": "", "kind": "rebalance"}, {"kind": "rebalance"},
                                  {"source": "aws-imds", "at": -1}, {"source": "x" * 61}])
def test_a_bad_warning_is_refused_and_changes_nothing(world, body):
    job_id, instance = running(world)
    with pytest.raises(AssertionError, match="422|source|at"):
        world.agent(instance)("warning", body)
    [attempt] = world.attempts(job_id)
    assert attempt.warned_at is None and events(world, "early_warning") == []


def test_a_gang_with_a_warned_node_moves_whole_to_spot_in_another_zone(world):
    from gang_world import GANG, alive_for, generations, open_by_rank, ranks_saved_and_stopped, report_in
    from gang_world import running_gang, standing_by

    nodes = running_gang(world, GANG.replace("spot: {", "spot: {on_rebalance: move, "))
    zone = nodes[0].zone
    world.agent(nodes[1].instance_id)("warning", REBALANCE)
    alive_for(world, nodes, 20)
    standbys = standing_by(world)
    assert sorted(standbys) == [0, 1, 2] and {(a.zone, a.market) for a in standbys.values()} != {(zone, "spot")}
    assert {a.market for a in standbys.values()} == {"spot"} and len({a.zone for a in standbys.values()}) == 1
    assert f"rebalancing away from {zone}" in events(world, "move_started")[0].message
    report_in(world, attempts=standbys)
    world.tick()
    assert generations(world)[0].state == "stopping"
    ranks_saved_and_stopped(world, nodes)
    world.tick()
    moved = open_by_rank(world)
    assert {a.id for a in moved.values()} == {a.id for a in standbys.values()} and generations(world)[1].state == "running"
    assert world.job(1).preemptions == 0
    alive_for(world, moved, 60)
    assert not standing_by(world), "the gang's new nodes were not warned: it stays"


def test_a_gang_without_move_only_records_the_warning(world):
    from gang_world import GANG, alive_for, running_gang, standing_by

    nodes = running_gang(world, GANG)
    world.agent(nodes[0].instance_id)("warning", REBALANCE)
    alive_for(world, nodes, 40)
    assert not standing_by(world) and len(events(world, "early_warning")) == 1
