"""A job that fails through start failures (the instance never started the agent) says so, with the boot output."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gang_world import GANG, open_by_rank, report_in  # noqa: E402  (tests/control is on sys.path via conftest)
from world import SPEC  # noqa: E402

MANY_LINES = "\n".join(f"boot line {n}" for n in range(40))
ONE_LONG_LINE = "x" * 10_000 + " the end"


def _fail_to_start(world, job_id: int, state: str, output: str) -> None:
    world.tick()
    instance = world.attempts(job_id)[-1].instance_id
    world.cloud.instances[instance] = replace(
        world.cloud.instances[instance], state=state, start_failure=f"the boot command exited 1: {output}")
    world.tick(61)  # past boot_timeout (60 s)


def _command_fails(world, job_id: int) -> None:
    """The job's command starts, then exits 3."""
    instance = world.run_to_running(job_id)
    world.agent(instance)("exit", {"outcome": "failed", "exit_code": 3})
    world.tick()


@pytest.mark.parametrize(("state", "output", "kept", "dropped"), [
    ("pending", MANY_LINES, "boot line 39", "boot line 19\n"),  # boot timeout: could not start the agent
    ("terminated", ONE_LONG_LINE, "x the end", "x" * 2500),  # ended before its agent started
], ids=["many-lines", "one-long-line"])
def test_a_job_failed_by_start_failures_says_so_with_the_last_boot_output(world, state, output, kept, dropped):
    """The reason read "the command failed 2 times": the boot output was only in each attempt's end event."""
    job_id = world.submit(SPEC)  # max_restarts_on_error: 1
    _fail_to_start(world, job_id, state, "the first boot's own output")
    _fail_to_start(world, job_id, state, output)
    job = world.job(job_id)
    assert job.state == "FAILED" and job.restarts_on_error == 2
    reason = job.failure_reason
    assert "command failed" not in reason
    assert "start" in reason and "2" in reason and "max_restarts_on_error=1" in reason
    assert kept in reason and dropped not in reason and "the first boot's own output" not in reason
    assert len(reason) < 2600


def test_a_job_whose_last_failure_is_the_command_keeps_the_commands_reason(world):
    job_id = world.submit(SPEC)
    _fail_to_start(world, job_id, "pending", "no spotrun here")
    _command_fails(world, job_id)
    assert world.job(job_id).failure_reason == "the command failed 2 times (max_restarts_on_error=1)"


def test_a_job_failed_by_the_command_then_a_start_failure_counts_each_kind(world):
    job_id = world.submit(SPEC)
    _command_fails(world, job_id)
    _fail_to_start(world, job_id, "pending", "No module named spotrun.agent")
    last = world.attempts(job_id)[-1].instance_id
    assert world.job(job_id).failure_reason == (
        "failed 2 times (max_restarts_on_error=1), 1 of them because the agent could not be started; the last, "
        f"on instance {last}: the boot command exited 1: No module named spotrun.agent"
    )


def test_a_gang_failed_by_a_nodes_start_failures_says_so_with_its_boot_output(world):
    world.submit(GANG)  # max_restarts_on_error: 1
    world.tick()
    for _ in range(2):
        report_in(world, ranks=(0, 1))
        node = open_by_rank(world)[2]
        world.cloud.instances[node.instance_id] = replace(
            world.cloud.instances[node.instance_id], state="terminated",
            start_failure="the boot command exited 1: No module named spotrun.agent")
        world.tick()
        world.tick()
    job = world.job(1)
    assert job.state == "FAILED" and job.restarts_on_error == 2
    assert job.failure_reason == (
        "the agent could not be started 2 times (max_restarts_on_error=1); the last, on node 2 "
        f"({node.instance_id}): the boot command exited 1: No module named spotrun.agent"
    )


NO_RESTARTS = SPEC.replace("max_restarts_on_error: 1", "max_restarts_on_error: 0")


def test_a_job_that_failed_once_says_once(world):
    """It said "the command failed 1 times"."""
    job_id = world.submit(NO_RESTARTS)
    _command_fails(world, job_id)
    assert world.job(job_id).failure_reason == "the command failed once (max_restarts_on_error=0)"


def test_a_job_whose_agent_could_not_start_once_says_once(world):
    job_id = world.submit(NO_RESTARTS)
    _fail_to_start(world, job_id, "pending", "no spotrun here")
    reason = world.job(job_id).failure_reason
    assert reason.startswith("the agent could not be started once (max_restarts_on_error=0); the last, on "), reason


def test_a_gang_whose_command_failed_once_says_once(world):
    world.submit(GANG.replace("max_restarts_on_error: 1", "max_restarts_on_error: 0"))
    world.tick()
    report_in(world)
    world.tick()
    nodes = open_by_rank(world)
    world.agent(nodes[1].instance_id)("generation_exit", {"generation": 1, "exit_code": 1})
    world.tick()
    for rank in (0, 2):
        world.agent(nodes[rank].instance_id)("generation_exit", {"generation": 1, "exit_code": -15})
    world.tick()
    world.tick()
    job = world.job(1)
    assert (job.state, job.failure_reason) == ("FAILED", "the command failed once (max_restarts_on_error=0)")


@pytest.mark.parametrize(("count", "said"), [(1, "once"), (2, "2 times"), (0, "0 times"), (11, "11 times")])
def test_times_says_once_and_n_times(count, said):
    from spotrun.control.wording import times

    assert times(count) == said
