"""Running multi-node jobs moved by their policy, make-before-break (in-memory cloud, real agent API, manual clock):
a standby gang boots while the generation trains on, and takes over only once every one of its nodes is up."""

from __future__ import annotations

import pytest

from gang_world import (  # noqa: E402  (tests/control is on sys.path via conftest)
    DEADLINE_GANG, GANG, alive_for, generations, open_by_rank, ranks_saved_and_stopped, report_in, standing_by, stopped,
)
from memory_cloud import Crash  # noqa: E402
from spotrun.control import jobs
from spotrun.policy import GiveUp, Keep, Launch, Wait
from world import World  # noqa: E402


def running_deadline_gang(world: World, scripted) -> dict:
    scripted.answer = Keep("spot is fine")
    world.submit(DEADLINE_GANG)
    world.tick()
    report_in(world)
    world.tick()
    nodes = open_by_rank(world)
    assert generations(world)[0].state == "running" and {a.market for a in nodes.values()} == {"spot"}
    return nodes


def ask_to_move(world: World, scripted, nodes: dict, zone: str = "m-a", market: str = "on-demand") -> dict:
    """The policy wants the gang elsewhere; returns the standbys launched there, by rank."""
    scripted.answer = Launch(zone, market, "the deadline is near")
    alive_for(world, nodes, 61)
    return standing_by(world)


def node_2_replaced(world: World, nodes: dict) -> dict:
    """Node 2 is taken back; the others save and stop, its replacement reports in, the next generation runs. The
    gang's nodes then."""
    world.cloud.reclaim(nodes[2].instance_id)
    world.tick()
    for rank in (0, 1):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 1, "exit_code": 75})
    world.tick()
    report_in(world, ranks=(2,))
    world.tick()
    return open_by_rank(world)


def crash_between_marking_an_end_and_ending(world: World, monkeypatch) -> None:
    """The next tick dies after it marked an attempt "ending" and before it ended it; the controller restarts."""

    def crash(attempt_id, after, **_):
        raise Crash()

    monkeypatch.setattr(world.controller, "finish_attempt", crash)
    with pytest.raises(Crash):
        world.tick()
    monkeypatch.undo()
    world.controller = world.new_controller()


def test_a_gang_moves_to_on_demand_only_once_every_standby_is_up(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    alive_for(world, nodes, 61)
    assert scripted.asked >= 1 and not scripted.last_context.moves_drain_first
    assert scripted.last_context.current.market == "spot"

    standbys = ask_to_move(world, scripted, nodes)
    assert sorted(standbys) == [0, 1, 2]
    assert {(a.zone, a.market) for a in standbys.values()} == {("m-a", "on-demand")}
    assert {rank: a.standby_for for rank, a in standbys.items()} == {rank: a.id for rank, a in nodes.items()}
    assert len(world.cloud.running()) == 6 and generations(world)[0].state == "running"
    assert world.agent(standbys[0].instance_id)("heartbeat", {})["gang"] is None, "a standby is in no generation"

    asked = scripted.asked
    report_in(world, ranks=(0, 1), attempts=standbys)
    alive_for(world, {**nodes, 3: standbys[0], 4: standbys[1]}, 21)  # within boot_timeout (60 s)
    assert generations(world)[0].state == "running", "the gang trains on until every standby is up"
    assert scripted.asked == asked, "no other move is asked for while one is under way"

    report_in(world, ranks=(2,), attempts=standbys)
    world.tick()
    first = generations(world)[0]
    assert first.state == "stopping" and first.stop_reason == "moving the gang to on-demand in m-a"
    for node in nodes.values():
        assert "on-demand in m-a are up" in world.agent(node.instance_id)("heartbeat", {})["stop"]

    ranks_saved_and_stopped(world, nodes)
    world.tick()
    assert {a.end_reason for a in world.attempts(1) if a.id in {n.id for n in nodes.values()}} == {"migrated"}
    first, second = generations(world)
    assert first.end_reason == "moved" and second.state == "running"
    assert second.members == {str(rank): a.id for rank, a in standbys.items()}
    assert second.master_addr == open_by_rank(world)[0].address == "10.0.0.4"
    assert len(world.cloud.running()) == 3 and not standing_by(world)
    job = world.job(1)
    assert job.state == "RUNNING" and job.preemptions == 0 and job.restarts_on_error == 0

    scripted.answer = Launch("m-a", "on-demand", "stay")
    alive_for(world, open_by_rank(world), 61)
    assert scripted.asked > asked and scripted.last_context.current.market == "on-demand"
    assert not standing_by(world), "the answer is where the gang already runs"


def test_in_its_own_zone_only_the_nodes_on_the_other_market_move(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    scripted.placement = Launch("m-a", "on-demand", "the lost node's replacement on on-demand")
    mixed = node_2_replaced(world, nodes)
    assert generations(world)[1].state == "running"
    assert [a.market for a in mixed.values()] == ["spot", "spot", "on-demand"]

    standbys = ask_to_move(world, scripted, mixed, zone="m-a", market="spot")
    assert scripted.last_context.current.market == "spot", "with a deadline, one node on spot is enough to be taken"
    assert sorted(standbys) == [2] and standbys[2].standby_for == mixed[2].id and standbys[2].market == "spot"
    report_in(world, ranks=(2,), attempts=standbys)
    world.tick()
    assert generations(world)[1].state == "stopping"
    stops = {rank: world.agent(node.instance_id)("heartbeat", {})["stop"] for rank, node in mixed.items()}
    assert stops[0] is None and stops[1] is None and stops[2], "the nodes staying only stop their ranks"
    for node in mixed.values():
        world.agent(node.instance_id)("generation_exit", {"generation": 2, "exit_code": 75})
    stopped(world, mixed[2])
    world.tick()
    second, third = generations(world)[1:]
    assert second.end_reason == "moved" and third.state == "running"
    assert third.members == {"0": mixed[0].id, "1": mixed[1].id, "2": standbys[2].id}
    assert {a.market for a in open_by_rank(world).values()} == {"spot"} and len(world.cloud.running()) == 3
    assert world.job(1).restarts_on_error == 0


def test_a_standby_refused_gives_the_others_back_and_the_gang_runs_on(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    world.cloud.capacity["m-b"] = False
    assert ask_to_move(world, scripted, nodes, zone="m-b", market="spot") == {}
    tries = [a for a in world.attempts(1) if a.standby_for is not None]
    assert sorted(a.end_reason for a in tries) == ["no_capacity", "released", "released"]
    assert generations(world)[0].state == "running" and len(world.cloud.running()) == 3
    assert all(a.state == "running" for a in open_by_rank(world).values())
    assert world.job(1).preemptions == 0

    alive_for(world, nodes, 41)  # asked again after reconsider_every (60 s): refused again
    assert len([a for a in world.attempts(1) if a.standby_for is not None]) == 6 and not standing_by(world)
    world.cloud.capacity["m-b"] = True
    alive_for(world, nodes, 61)
    assert not standing_by(world), "after two moves given up, the next waits twice boot_timeout (120 s)"
    alive_for(world, nodes, 61)
    assert sorted(standing_by(world)) == [0, 1, 2]


def test_a_standby_refused_holds_back_only_the_moves_to_its_zone_and_market(world, scripted):
    """No capacity in m-b says nothing of m-c: the refusal held back the gang's every move for the boot timeout, as a
    standby lost does, where a single node's is held back only there."""
    world.controller = world.new_controller(boot_timeout=600)
    nodes = running_deadline_gang(world, scripted)
    world.cloud.capacity["m-b"] = False
    assert ask_to_move(world, scripted, nodes, zone="m-b", market="spot") == {}
    assert sorted(ask_to_move(world, scripted, nodes, zone="m-c", market="spot")) == [0, 1, 2]


def test_a_standby_taken_back_before_the_move_ends_them_all(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes, zone="m-b", market="spot")
    report_in(world, ranks=(0, 2), attempts=standbys)
    world.cloud.reclaim(standbys[1].instance_id)
    world.tick()
    ends = {a.node_rank: a.end_reason for a in world.attempts(1) if a.standby_for is not None}
    assert ends == {0: "released", 1: "preempted", 2: "released"}
    assert generations(world)[0].state == "running" and len(world.cloud.running()) == 3
    assert world.job(1).preemptions == 0, "a standby never ran the job"


def test_a_node_lost_while_the_standbys_boot_sends_the_gang_to_them(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes)
    world.cloud.reclaim(nodes[1].instance_id)
    world.tick()
    assert generations(world)[0].state == "stopping" and world.job(1).preemptions == 1
    for rank in (0, 2):
        assert world.agent(nodes[rank].instance_id)("heartbeat", {})["stop"], "the survivors stop to move too"
    ranks_saved_and_stopped(world, {r: nodes[r] for r in (0, 2)})
    world.tick()
    ends = {a.node_rank: a.end_reason for a in world.attempts(1) if a.id in {n.id for n in nodes.values()}}
    assert ends == {0: "migrated", 1: "preempted", 2: "migrated"}
    assert generations(world)[0].end_reason == "interrupted" and len(generations(world)) == 1
    assert {rank: a.id for rank, a in open_by_rank(world).items()} == {r: a.id for r, a in standbys.items()}

    report_in(world, attempts=standbys)
    world.tick()
    second = generations(world)[1]
    assert second.state == "running" and second.members == {str(r): a.id for r, a in standbys.items()}
    assert len(world.cloud.running()) == 3


def test_a_standby_lost_after_the_gang_stopped_leaves_its_rank_to_be_filled_where_the_others_are(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes, zone="m-b", market="spot")
    report_in(world, attempts=standbys)
    world.tick()
    assert generations(world)[0].state == "stopping"
    world.cloud.reclaim(standbys[2].instance_id)
    world.tick()
    assert next(a for a in world.attempts(1) if a.id == standbys[2].id).end_reason == "preempted"
    assert generations(world)[0].state == "stopping", "the move goes on"
    ranks_saved_and_stopped(world, nodes)
    world.tick()
    assert generations(world)[0].end_reason == "moved"
    placed = open_by_rank(world)
    assert placed[0].id == standbys[0].id and placed[1].id == standbys[1].id
    assert placed[2].id != standbys[2].id and placed[2].zone == "m-b" and placed[2].standby_for is None
    assert world.job(1).preemptions == 0


def test_a_node_that_does_not_stop_in_time_is_ended_and_the_move_goes_on(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes)
    report_in(world, attempts=standbys)
    world.tick()
    ranks_saved_and_stopped(world, {r: nodes[r] for r in (0, 1)})
    # node 2 keeps beating but never stops its command (grace 30 s + 15 s margin by default)
    alive_for(world, {**{r + 3: a for r, a in standbys.items()}, 2: nodes[2]}, 120)
    assert {a.end_reason for a in world.attempts(1) if a.id in {n.id for n in nodes.values()}} == {"migrated"}
    assert world.cloud.instances[nodes[2].instance_id].state == "terminated"
    assert generations(world)[0].end_reason == "moved" and generations(world)[1].state == "running"
    assert world.job(1).restarts_on_error == 0


def test_a_gang_cancelled_while_standbys_boot_ends_every_instance(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    ask_to_move(world, scripted, nodes)
    jobs.request_cancel(world.store, 1, world.clock.now())
    for _ in range(3):
        world.tick()
    for node in nodes.values():
        stopped(world, node)
        world.tick()
    assert world.job(1).state == "CANCELLED" and not world.cloud.running()
    assert all(a.ended_at is not None for a in world.attempts(1))


def test_a_gang_that_succeeds_while_standbys_boot_gives_them_back_unneeded(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes)
    for node in nodes.values():
        world.agent(node.instance_id)("generation_exit", {"generation": 1, "exit_code": 0})
    world.tick()
    world.tick()
    assert world.job(1).state == "SUCCEEDED" and not world.cloud.running()
    ends = {a.id: a.end_reason for a in world.attempts(1)}
    assert {ends[a.id] for a in nodes.values()} == {"succeeded"}
    assert {ends[a.id] for a in standbys.values()} == {"cancelled"}


def test_a_gang_told_to_wait_stops_every_rank_and_waits(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    scripted.answer = scripted.placement = Wait(world.clock.now() + 3600, "spot too dear for now")
    alive_for(world, nodes, 61)
    assert generations(world)[0].state == "stopping" and not standing_by(world)
    ranks_saved_and_stopped(world, nodes)
    world.tick()
    assert world.job(1).state == "WAITING" and not world.cloud.running()


def test_a_gang_whose_policy_gives_up_fails_with_its_reason(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    scripted.answer = GiveUp("the deadline cannot be met")
    alive_for(world, nodes, 61)
    world.tick()
    job = world.job(1)
    assert job.state == "FAILED" and job.failure_reason == "the deadline cannot be met" and not world.cloud.running()


def test_a_crash_while_the_standbys_launch_launches_none_twice_and_the_move_goes_on(world, scripted):
    nodes = running_deadline_gang(world, scripted)
    scripted.answer = Launch("m-b", "spot", "spot in m-b")
    world.cloud.crash_after_launch = True  # the controller dies right after the first standby's launch
    with pytest.raises(Crash):
        alive_for(world, nodes, 61)
    assert len(world.cloud.running()) == 4
    world.controller = world.new_controller()  # restarted
    world.tick()
    standbys = standing_by(world)
    assert sorted(standbys) == [0, 1, 2] and len(world.cloud.running()) == 6, "each standby launched once"
    report_in(world, attempts=standbys)
    world.tick()
    assert generations(world)[0].state == "stopping"


def test_a_crash_after_a_standby_was_marked_to_end_still_gives_the_others_back(world, scripted, monkeypatch):
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes, zone="m-b", market="spot")
    world.cloud.reclaim(standbys[1].instance_id)
    crash_between_marking_an_end_and_ending(world, monkeypatch)
    world.tick()
    assert not standing_by(world) and len(world.cloud.running()) == 3
    assert generations(world)[0].state == "running"


def test_a_gang_that_fell_back_to_on_demand_goes_back_to_spot_with_the_default_policy(world):
    spec = GANG.replace("preemptions_before_fallback: 3}", "preemptions_before_fallback: 3, fallback_window: 10m}")
    world.controller = world.new_controller(heartbeat_timeout=150)  # the hour below passes in ticks of 60 s
    world.submit(spec)
    world.cloud.capacity = {zone: False for zone in world.cloud.capacity}
    for _ in range(20):  # one round of refusals in every zone, a wait, another round: on-demand
        world.tick(30)
        if open_by_rank(world) and all(a.market == "on-demand" for a in open_by_rank(world).values()):
            break
    nodes = open_by_rank(world)
    assert sorted(nodes) == [0, 1, 2] and {a.market for a in nodes.values()} == {"on-demand"}
    world.cloud.capacity = {zone: True for zone in world.cloud.capacity}
    report_in(world)
    world.tick()
    assert generations(world)[0].state == "running"

    alive_for(world, nodes, 1800, step=60)
    assert not standing_by(world), "every zone refused spot within the hour: no zone without bad news yet"
    for _ in range(40):  # every zone's bad news is an hour old by ~3,900 s
        alive_for(world, nodes, 60, step=60)
        if standing_by(world):
            break
    standbys = standing_by(world)
    assert sorted(standbys) == [0, 1, 2] and {a.market for a in standbys.values()} == {"spot"}
    report_in(world, attempts=standbys)
    world.tick()
    ranks_saved_and_stopped(world, nodes)
    world.tick()
    second = generations(world)[1]
    assert second.state == "running" and {a.market for a in open_by_rank(world).values()} == {"spot"}
    assert {a.end_reason for a in world.attempts(1) if a.id in {n.id for n in nodes.values()}} == {"migrated"}
    assert world.job(1).preemptions == 0 and world.job(1).restarts_on_error == 0


def test_a_gang_without_a_deadline_sends_its_node_that_fell_back_to_on_demand_back_to_spot(world):
    spec = GANG.replace("preemptions_before_fallback: 3}", "preemptions_before_fallback: 1, fallback_window: 10m}")
    world.submit(spec)
    world.tick()
    report_in(world)
    world.tick()
    nodes = open_by_rank(world)
    mixed = node_2_replaced(world, nodes)  # one preemption: its replacement falls back to on-demand
    assert [a.market for a in mixed.values()] == ["spot", "spot", "on-demand"]
    assert generations(world)[1].state == "running"

    for _ in range(60):  # its fallback window: 10 minutes on on-demand; spot still runs in its zone (news of now)
        alive_for(world, mixed, 20)
        if standing_by(world):
            break
    standbys = standing_by(world)
    assert sorted(standbys) == [2] and (standbys[2].zone, standbys[2].market) == (mixed[2].zone, "spot")
    assert world.clock.now() - mixed[2].started_at >= 600



def test_a_gang_that_succeeds_after_a_crash_half_ended_a_standby_still_ends(world, scripted, monkeypatch):
    """The gang's end waited on the half-ended standby, and the move's step returned early once the gang was over:
    the job stayed RUNNING, its nodes and the other standbys running (and billed) forever."""
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes, zone="m-b", market="spot")
    world.cloud.reclaim(standbys[0].instance_id)
    crash_between_marking_an_end_and_ending(world, monkeypatch)
    for node in nodes.values():  # meanwhile every rank finished the run
        world.agent(node.instance_id)("generation_exit", {"generation": 1, "exit_code": 0})
    for _ in range(3):
        world.tick()
    assert world.job(1).state == "SUCCEEDED" and not world.cloud.running()
    assert all(attempt.ended_at is not None for attempt in world.attempts(1))


def test_the_nodes_stopping_to_move_have_until_another_nodes_notice_deadline(world, scripted):
    """A cloud's 120 s notice on one node while the gang stops to move: the stop order gives every rank until that
    deadline, but the nodes moving were ended "migrated" at notice_grace + 15 s after their stop, mid-save."""
    nodes = running_deadline_gang(world, scripted)
    standbys = ask_to_move(world, scripted, nodes)
    report_in(world, attempts=standbys)
    world.tick()
    assert generations(world)[0].state == "stopping"
    deadline = world.clock.now() + 120
    world.agent(nodes[1].instance_id)("notice", {"source": "aws-imds", "deadline": deadline})
    order = world.agent(nodes[0].instance_id)("heartbeat", {})["gang"]
    assert order["state"] == "stopping" and order["stop_by"] == deadline
    alive_for(world, {**{r + 3: a for r, a in standbys.items()}, **nodes}, 100)  # every rank saves until then
    ended = [a for a in world.attempts(1) if a.id in {n.id for n in nodes.values()} and a.ended_at is not None]
    assert not ended, "a node stopping to move was ended before the notice's deadline"
    ranks_saved_and_stopped(world, nodes)
    world.tick()
    assert generations(world)[0].end_reason == "moved" and generations(world)[1].state == "running"
