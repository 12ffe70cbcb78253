"""Helpers for the multi-node tests of the reconcile tick: the gang's specs, its generations, its nodes and the
standbys of a move, and its agents reporting in and beating."""

from __future__ import annotations

from sqlalchemy import select

from spotrun.control.gang_records import split_standbys
from spotrun.state import Generation
from world import World

GANG = """
name: gang
run: "true"
resources: {cloud: local, instance_type: local.cpu, nodes: 3}
spot: {zones: [m-a, m-b, m-c], preemptions_before_fallback: 3}
distributed: {gang_timeout: 30s}
max_restarts_on_error: 1
"""

DEADLINE_GANG = GANG.replace(
    "preemptions_before_fallback: 3}", "preemptions_before_fallback: 3, deadline: 10h, policy: scripted}"
) + "estimated_duration: 5h\n"


def generations(world: World, job_id: int = 1) -> list[Generation]:
    with world.store.session() as session:
        found = list(session.scalars(select(Generation).where(Generation.job_id == job_id).order_by(Generation.number)))
        session.expunge_all()
        return found


def open_by_rank(world: World) -> dict:
    """The gang's open nodes by rank (not the standbys of a move under way)."""
    nodes, _ = split_standbys([a for a in world.attempts(1) if a.ended_at is None])
    return {a.node_rank: a for a in nodes}


def running_gang(world: World, spec: str = GANG) -> dict:
    """Submit the gang and let every node report in, so that its first generation runs; its nodes by rank."""
    world.submit(spec)
    world.tick()
    report_in(world)
    world.tick()
    return open_by_rank(world)


def standing_by(world: World) -> dict:
    """The held standbys of a move under way, by rank."""
    _, standbys = split_standbys([a for a in world.attempts(1) if a.ended_at is None])
    return {a.node_rank: a for a in standbys}


def report_in(world: World, ranks=(0, 1, 2), attempts: dict | None = None) -> None:
    """The agents of `attempts` (default: the gang's nodes) of these ranks report in with an address and a port."""
    for rank, attempt in (attempts if attempts is not None else open_by_rank(world)).items():
        if rank in ranks:
            world.agent(attempt.instance_id)("started", {"address": f"10.0.0.{attempt.number}", "port": 29500 + rank})


def alive_for(world: World, nodes: dict, seconds: float, step: float = 20) -> None:
    """Let `seconds` pass in ticks of `step` seconds (under the controller's heartbeat timeout), the agents of `nodes`
    heartbeating."""
    for _ in range(int(seconds // step)):
        for node in nodes.values():
            world.agent(node.instance_id)("heartbeat", {})
        world.tick(step)


def stopped(world: World, node) -> None:
    """The node's agent ends its attempt after a stop the controller asked, as after a notice: "resume me"."""
    world.agent(node.instance_id)("exit", {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True})


def ranks_saved_and_stopped(world: World, nodes: dict, generation: int = 1) -> None:
    """Every rank of `generation` on `nodes` committed the agreed step and exited "resume me"; then the agents end
    their attempts, as after any stop the controller asks."""
    for node in nodes.values():
        world.agent(node.instance_id)("generation_exit", {"generation": generation, "exit_code": 75})
    for node in nodes.values():
        stopped(world, node)
