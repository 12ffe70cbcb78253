"""Multi-node jobs in the reconcile tick (in-memory cloud, real agent API, manual clock): gang placement and
give-back, generations started, stopped and counted."""

from __future__ import annotations

import pytest
from gang_world import GANG, alive_for, generations, open_by_rank, report_in, running_gang  # noqa: E402  (tests/control is on sys.path)
from memory_cloud import Crash, MemoryCloud  # noqa: E402
from spotrun.control import jobs
from spotrun.providers import NoCapacity
from world import World  # noqa: E402


class LimitedCloud(MemoryCloud):
    """The first zone asked for fits only two spot instances."""

    small_zone = None

    def launch(self, request):
        self.small_zone = self.small_zone or request.zone
        live = [i for i in self.running() if i.zone == request.zone and i.market == "spot"]
        if request.zone == self.small_zone and self.find_by_token(request.client_token) is None and len(live) >= 2:
            raise NoCapacity(f"only {len(live)} spot instances fit in {request.zone}")
        return super().launch(request)


def test_a_refused_node_gives_the_gang_back_and_it_is_placed_elsewhere_whole(store, tmp_path) -> None:
    world = World(store, tmp_path)
    world.cloud = LimitedCloud(world.clock)
    world.controller = world.new_controller()
    world.submit(GANG)
    world.tick()
    tries = world.attempts(1)
    small = world.cloud.small_zone
    assert sorted((a.zone, a.node_rank, a.end_reason) for a in tries) == [
        (small, 0, "released"), (small, 1, "released"), (small, 2, "no_capacity"),
    ]
    assert not world.cloud.running(), "the two instances it got were given back"
    world.tick()
    placed = open_by_rank(world)
    assert sorted(placed) == [0, 1, 2] and len({a.zone for a in placed.values()}) == 1
    assert small not in {a.zone for a in placed.values()}
    assert len(world.cloud.running()) == 3


def test_a_gang_incomplete_after_its_timeout_is_given_back(store, tmp_path) -> None:
    world = World(store, tmp_path)
    world.submit(GANG)
    world.tick()
    report_in(world, ranks=(0, 1))  # node 2's agent never reports in
    world.tick(10)
    assert not generations(world) and len(world.cloud.running()) == 3
    for rank in (0, 1):
        world.agent(open_by_rank(world)[rank].instance_id)("heartbeat", {})
    world.tick(25)
    ended = [a.end_reason for a in world.attempts(1)]
    assert ended == ["released"] * 3 and not world.cloud.running()


def test_generations_start_with_node_0_as_master_and_a_failure_restarts_every_rank(store, tmp_path) -> None:
    world = World(store, tmp_path)
    world.submit(GANG)
    world.tick()
    report_in(world, ranks=(1, 2))
    world.tick()
    assert not generations(world), "no rank starts before every node is up"
    report_in(world, ranks=(0,))
    world.tick()
    first = generations(world)[0]
    nodes = open_by_rank(world)
    assert (first.state, first.master_addr, first.master_port) == ("running", nodes[0].address, 29500)
    assert world.job(1).state == "RUNNING"
    order = world.agent(nodes[2].instance_id)("heartbeat", {})["gang"]
    assert order == {"generation": 1, "state": "running", "master_addr": nodes[0].address, "master_port": 29500,
                     "node_rank": 2, "nnodes": 3}

    world.agent(nodes[1].instance_id)("generation_exit", {"generation": 1, "exit_code": 1})
    world.tick()
    assert generations(world)[0].state == "stopping"
    assert world.agent(nodes[0].instance_id)("heartbeat", {})["gang"]["state"] == "stopping"
    for rank in (0, 2):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 1, "exit_code": -15})
    world.tick()
    runs = generations(world)
    assert runs[0].end_reason == "failed" and world.job(1).restarts_on_error == 1
    assert [r.number for r in runs] == [1, 2] and runs[1].members == runs[0].members, "same nodes, all restarted"

    for rank in (0, 1, 2):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 2, "exit_code": 0})
    world.tick()
    world.tick()
    assert world.job(1).state == "SUCCEEDED"
    assert {a.end_reason for a in world.attempts(1)} == {"succeeded"} and not world.cloud.running()


def test_a_preempted_node_alone_is_replaced_in_the_survivors_zone(store, tmp_path) -> None:
    world = World(store, tmp_path)
    nodes = running_gang(world)
    world.cloud.reclaim(nodes[0].instance_id)
    world.tick()
    job = world.job(1)
    assert job.preemptions == 1 and generations(world)[0].state == "stopping"
    for rank in (1, 2):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 1, "exit_code": 75})
    world.tick()
    replaced = open_by_rank(world)
    assert replaced[1].id == nodes[1].id and replaced[2].id == nodes[2].id
    assert replaced[0].id != nodes[0].id and replaced[0].zone == nodes[0].zone
    assert generations(world)[0].end_reason == "interrupted" and world.job(1).restarts_on_error == 0
    report_in(world, ranks=(0,))
    world.tick()
    second = generations(world)[1]
    assert second.state == "running" and second.master_addr == open_by_rank(world)[0].address != nodes[0].address


def master_taken_and_the_others_stopped(world: World) -> dict:
    """The cloud takes node 0 of a running gang; ranks 1 and 2 save and stop; the gang's nodes as they were."""
    nodes = running_gang(world)
    world.cloud.reclaim(nodes[0].instance_id)
    world.tick()
    for rank in (1, 2):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 1, "exit_code": 75})
    return nodes


def test_a_node_lost_while_the_gang_waits_for_a_replacement_is_replaced_too(store, tmp_path) -> None:
    # node 0 is taken and replaced; before its replacement reports in, survivor node 1 is taken too
    world = World(store, tmp_path)
    nodes = master_taken_and_the_others_stopped(world)
    world.tick()
    waiting = open_by_rank(world)
    assert waiting[0].id != nodes[0].id and len(generations(world)) == 1
    world.cloud.reclaim(nodes[1].instance_id)
    world.tick()
    world.tick()
    replaced = open_by_rank(world)
    assert replaced[0].id == waiting[0].id and replaced[1].id != nodes[1].id and replaced[2].id == nodes[2].id
    assert world.job(1).preemptions == 2 and world.job(1).restarts_on_error == 0
    assert len(generations(world)) == 1, "no generation started without node 1"
    report_in(world, ranks=(0, 1))
    world.tick()
    second = generations(world)[1]
    assert second.state == "running"
    assert {int(rank): attempt for rank, attempt in second.members.items()} == {
        rank: attempt.id for rank, attempt in replaced.items()
    }


def test_a_node_whose_agent_keeps_failing_fails_the_job_after_max_restarts(store, tmp_path) -> None:
    world = World(store, tmp_path)
    world.submit(GANG)  # max_restarts_on_error: 1
    world.tick()
    for _ in range(2):
        report_in(world)
        node = open_by_rank(world)[2]
        world.agent(node.instance_id)("exit", {"outcome": "failed", "exit_code": 1})  # e.g. its setup failed
        world.tick()
        world.tick()
    job = world.job(1)
    assert job.state == "FAILED" and "node 2" in job.failure_reason and job.restarts_on_error == 2
    assert not world.cloud.running() and all(a.ended_at is not None for a in world.attempts(1))


def test_a_node_whose_heartbeats_stop_is_lost_and_replaced_without_counting(store, tmp_path) -> None:
    world = World(store, tmp_path)
    nodes = running_gang(world)
    for _ in range(4):  # nodes 0 and 2 keep beating; node 1 (its instance still "running") has gone silent
        world.tick(10)
        for rank in (0, 2):
            world.agent(nodes[rank].instance_id)("heartbeat", {})
    lost = next(a for a in world.attempts(1) if a.id == nodes[1].id)
    assert lost.end_reason == "lost" and world.cloud.instances[nodes[1].instance_id].state == "terminated"
    assert generations(world)[0].state == "stopping"
    for rank in (0, 2):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 1, "exit_code": 1})  # gloo: peer gone
    world.tick()
    job = world.job(1)
    assert generations(world)[0].end_reason == "interrupted" and job.restarts_on_error == 0 and job.preemptions == 0
    assert open_by_rank(world)[1].id != nodes[1].id


def test_a_gang_whose_nodes_are_all_taken_back_at_once_is_placed_on_spot_again(store, tmp_path) -> None:
    # one reclaim of three nodes is one preemption of the job for its fallback (preemptions_before_fallback: 3),
    # though the job's count shows every node's
    world = World(store, tmp_path)
    for node in running_gang(world).values():
        world.cloud.reclaim(node.instance_id)
    world.tick()
    world.tick()
    assert world.job(1).preemptions == 3
    replaced = open_by_rank(world)
    assert sorted(replaced) == [0, 1, 2] and {a.market for a in replaced.values()} == {"spot"}


def test_a_generation_every_rank_finished_succeeds_though_a_node_is_taken_before_the_next_tick(store, tmp_path):
    """It was "interrupted": a replacement was launched and the whole command ran again."""
    world = World(store, tmp_path)
    nodes = running_gang(world)
    for node in nodes.values():
        world.agent(node.instance_id)("generation_exit", {"generation": 1, "exit_code": 0})
    world.cloud.reclaim(nodes[2].instance_id)
    world.tick()
    world.tick()
    assert generations(world)[0].end_reason == "succeeded"
    assert world.job(1).state == "SUCCEEDED" and len(world.attempts(1)) == 3 and not world.cloud.running()


def test_the_ranks_have_until_a_noticed_nodes_deadline_to_stop_and_that_node_ends_preempted(store, tmp_path):
    """A 120 s notice: the stop order named no deadline (the agents killed their ranks after notice_grace, 30 s,
    mid-save) and the controller ended the noticed node as "lost" at notice_grace + 15 s."""
    world = World(store, tmp_path)
    nodes = running_gang(world)
    noticed = nodes[1]
    deadline = world.clock.now() + 120
    world.agent(noticed.instance_id)("notice", {"source": "aws-imds", "deadline": deadline})
    world.tick()
    assert generations(world)[0].state == "stopping"
    order = world.agent(nodes[0].instance_id)("heartbeat", {})["gang"]
    assert order["state"] == "stopping" and order["stop_by"] == deadline
    alive_for(world, nodes, 100)  # every agent beats on while its ranks save
    assert all(a.ended_at is None for a in world.attempts(1)), "ended before the notice's deadline"
    alive_for(world, nodes, 60)
    ended = next(a for a in world.attempts(1) if a.id == noticed.id)
    assert ended.end_reason == "preempted" and world.job(1).preemptions == 1


@pytest.mark.parametrize("over", ["cancel", "max_wait"])
def test_a_gang_over_while_a_nodes_launch_is_retried_launches_nothing_more(store, tmp_path, monkeypatch, over) -> None:
    """The pending node's launch was tried again in the tick after the cancel (or once max_wait had passed), before
    the gang ended: an instance made for a job already over."""
    world = World(store, tmp_path)
    real_launch, tries = world.cloud.launch, []

    def node_2_fails_once(request):
        tries.append(request.client_token)
        if len(tries) == 3:
            raise RuntimeError("connection reset")
        return real_launch(request)

    monkeypatch.setattr(world.cloud, "launch", node_2_fails_once)
    job_id = world.submit(GANG.replace("preemptions_before_fallback: 3}", "preemptions_before_fallback: 3, max_wait: 60s}"))
    world.tick()
    assert len(tries) == 3 and len(world.cloud.running()) == 2
    if over == "cancel":
        assert jobs.request_cancel(world.store, job_id, world.clock.now())
    else:
        world.clock.advance(61)
    world.tick()
    world.tick()
    assert len(tries) == 3
    assert world.job(job_id).state == ("CANCELLED" if over == "cancel" else "FAILED") and not world.cloud.running()
    assert {a.end_reason for a in world.attempts(job_id)} == {"cancelled"}


def noticed_and_saved(world: World, ranks: tuple[int, ...], generation: int) -> None:
    """The cloud notices the nodes of `ranks` (120 s); every rank saves and exits 75 and says so; the noticed nodes'
    agents report their attempts' exits a tick later (they flush their logs first)."""
    nodes = open_by_rank(world)
    for rank in ranks:
        world.agent(nodes[rank].instance_id)("notice", {"source": "aws-imds", "deadline": world.clock.now() + 120})
    world.tick()
    for node in nodes.values():
        world.agent(node.instance_id)("generation_exit", {"generation": generation, "exit_code": 75})
    world.tick()
    for rank in ranks:
        world.agent(nodes[rank].instance_id)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})
    world.tick()
    world.tick()


def test_a_notice_whose_ranks_all_saved_before_its_node_exited_is_not_a_command_failure(store, tmp_path) -> None:
    """Every rank's 75 came in before the noticed node's exit: the generation ended "stopped", counted as a failure
    of the command, and the next one started on the node being taken back."""
    world = World(store, tmp_path)
    nodes = running_gang(world)
    world.agent(nodes[1].instance_id)("notice", {"source": "aws-imds", "deadline": world.clock.now() + 120})
    world.tick()
    assert generations(world)[0].state == "stopping"
    for node in nodes.values():
        world.agent(node.instance_id)("generation_exit", {"generation": 1, "exit_code": 75})
    world.tick()
    assert generations(world)[0].end_reason == "interrupted" and world.job(1).restarts_on_error == 0
    assert len(generations(world)) == 1, "the next generation started on the node being taken back"


def test_two_preemption_notices_do_not_fail_a_gang_allowed_one_restart_on_error(store, tmp_path) -> None:
    world = World(store, tmp_path)
    running_gang(world)  # GANG: max_restarts_on_error: 1
    noticed_and_saved(world, ranks=(1,), generation=1)
    report_in(world, ranks=(1,))
    for _ in range(3):
        world.tick()
    second = generations(world)[-1]
    assert second.state == "running" and second.number == 2
    noticed_and_saved(world, ranks=(2,), generation=2)
    job = world.job(1)
    assert job.state != "FAILED" and job.restarts_on_error == 0 and job.preemptions == 2, job.failure_reason


def test_notices_on_two_nodes_at_once_replace_both_in_the_survivors_zone(store, tmp_path) -> None:
    world = World(store, tmp_path)
    nodes = running_gang(world)
    noticed_and_saved(world, ranks=(0, 2), generation=1)
    job, placed = world.job(1), open_by_rank(world)
    assert generations(world)[0].end_reason == "interrupted" and job.preemptions == 2 and job.restarts_on_error == 0
    assert placed[1].id == nodes[1].id and placed[0].id != nodes[0].id and placed[2].id != nodes[2].id
    assert {a.zone for a in placed.values()} == {nodes[1].zone}


class TwoSpotPerZoneCloud(MemoryCloud):
    """Every zone fits only two spot instances: a gang of three never gets its third node on spot."""

    def launch(self, request):
        live = [i for i in self.running() if i.zone == request.zone and i.market == "spot"]
        if request.market == "spot" and self.find_by_token(request.client_token) is None and len(live) >= 2:
            raise NoCapacity(f"only {len(live)} spot instances fit in {request.zone}")
        return super().launch(request)


def test_a_gang_refused_its_last_node_in_every_zone_falls_back_to_on_demand(store, tmp_path) -> None:
    """Each node launched reset the job's count of empty rounds: the gang took two spot nodes and gave them back,
    round after round (270 tries in 20 minutes, 180 instances paid for), and never fell back."""
    world = World(store, tmp_path)
    world.cloud = TwoSpotPerZoneCloud(world.clock)
    world.controller = world.new_controller()
    world.submit(GANG)
    for _ in range(120):  # 20 minutes in ticks of 10 s
        world.tick(10)
        if any(a.market == "on-demand" for a in world.attempts(1)):
            break
    tries = world.attempts(1)
    assert any(a.market == "on-demand" for a in tries), "still trying spot after 20 minutes"
    assert len([a for a in tries if a.instance_id is not None]) < 20


def test_a_crash_right_after_launching_a_replacement_launches_it_once(store, tmp_path) -> None:
    world = World(store, tmp_path)
    master_taken_and_the_others_stopped(world)
    world.cloud.crash_after_launch = True
    with pytest.raises(Crash):
        world.tick()
    world.controller = world.new_controller()
    world.tick()
    placed = open_by_rank(world)
    assert len(world.cloud.running()) == 3 and sorted(placed) == [0, 1, 2]
    assert all(a.instance_id for a in placed.values())
    report_in(world, ranks=(0,))
    world.tick()
    assert generations(world)[-1].state == "running" and generations(world)[-1].number == 2


def test_a_crash_while_a_timed_out_gang_is_given_back_gives_it_all_back(store, tmp_path) -> None:
    """The nodes were ended one by one: a crash after the first left the others looking like survivors, and a
    replacement for the first was launched, to be given back at the next tick."""
    world = World(store, tmp_path)
    world.submit(GANG)
    world.tick()
    report_in(world, ranks=(0, 1))
    world.tick(10)
    for rank in (0, 1):
        world.agent(open_by_rank(world)[rank].instance_id)("heartbeat", {})
    world.cloud.crash_after_terminate = True
    with pytest.raises(Crash):
        world.tick(25)
    world.controller = world.new_controller()
    world.tick()
    world.tick()
    ends = sorted((a.node_rank, a.end_reason) for a in world.attempts(1) if a.ended_at is not None)
    assert ends == [(0, "released"), (1, "released"), (2, "released")], "a node launched for a gang given back"
