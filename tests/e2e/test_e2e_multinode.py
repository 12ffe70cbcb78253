"""Multi-node jobs end to end: three local instances, each on its own loopback address, train one DDP model
(gloo, CPU) with the SDK; nodes are preempted (master included, and during a restart) and only they are replaced."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import Spotrun, ddp_job, final_ddp_result, reference_ddp
from spotrun.state import Attempt, Generation

pytestmark = pytest.mark.xdist_group("e2e")  # with `make test`'s workers: one e2e test at a time

EPOCHS = 6  # 48 steps over 3 ranks: the last generation still trains ~30 steps after the second loss
FIRST_STEP = re.compile(r"rank (\d+): first step (\d+) done at ([0-9.]+)")


def generations(world: Spotrun) -> list[Generation]:
    return world.rows(Generation, Generation.number)


def attempts(world: Spotrun) -> list[Attempt]:
    return world.rows(Attempt, Attempt.number)


def wait_training(world: Spotrun, step: int, generation: int) -> dict:
    """Until generation `generation` (or a later one) runs and a checkpoint after `step` is committed."""

    def check(row: dict) -> bool:
        started = any(g.number >= generation for g in generations(world))
        return row["state"] == "RUNNING" and started and (row["checkpoint_step"] or -1) > step

    return world.wait_for(1, check, timeout=120, what=f"generation {generation} training past step {step}")


def assert_done_and_exact(world: Spotrun, reference: dict) -> dict:
    done = world.wait_for(1, lambda r: r["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=180, what="the end")
    assert done["state"] == "SUCCEEDED", world.controller_log()
    assert final_ddp_result(world.home, 1)["sha256"] == reference["sha256"]
    assert not world.instance_processes(), "an agent or trainer outlived its job"
    assert all(i.state == "terminated" for i in world.cloud.list_instances())
    return done


def test_three_nodes_lose_the_master_then_a_worker_and_end_with_the_uninterrupted_weights(spotrun, tmp_path):
    spotrun.run("launch", str(ddp_job(tmp_path, epochs=EPOCHS)))

    row = wait_training(spotrun, -1, generation=1)
    first_master = generations(spotrun)[0].master_addr
    spotrun.run("preempt", "1", "--node", "0")  # the master
    spotrun.wait_for(1, lambda r: r["preemptions"] == 1, what="the master's preemption")
    row = wait_training(spotrun, row["checkpoint_step"], generation=2)
    second_master = generations(spotrun)[1].master_addr
    assert second_master != first_master, "the replaced master kept its address"

    spotrun.run("preempt", "1", "--node", "2")  # a worker
    spotrun.wait_for(1, lambda r: r["preemptions"] == 2, what="the worker's preemption")
    with ThreadPoolExecutor(1) as background:
        # the uninterrupted ranks (~15 s of CPU) train while the last generation's ranks sleep; not sooner, where
        # they would slow the `spotrun preempt` commands while the job trains towards its end
        uninterrupted = background.submit(reference_ddp, tmp_path, epochs=EPOCHS)
        wait_training(spotrun, row["checkpoint_step"], generation=3)
    done = assert_done_and_exact(spotrun, uninterrupted.result())
    assert done["preemptions"] == 2

    by_node: dict[int, list[Attempt]] = {}
    for attempt in attempts(spotrun):
        by_node.setdefault(attempt.node_rank, []).append(attempt)
    assert {node: len(tries) for node, tries in by_node.items()} == {0: 2, 1: 1, 2: 2}, "only lost nodes are replaced"
    assert [a.end_reason for a in by_node[0]] == ["preempted", "succeeded"]
    assert by_node[1][0].end_reason == "succeeded" and by_node[1][0].generation_done == 3
    ended = generations(spotrun)
    assert [g.end_reason for g in ended] == ["interrupted", "interrupted", "succeeded"]
    assert ended[2].master_addr == second_master  # a worker's loss does not move the master

    spotrun.env["COLUMNS"] = "250"  # rich fits the table to the terminal: give it room for every column
    status = spotrun.run("status", "1").stdout
    header = next(line for line in status.splitlines() if "address" in line)
    assert "node" in header and "cost" in header
    for attempt in attempts(spotrun):  # one row per node instance, with its address and its own cost
        row = next(line for line in status.splitlines() if attempt.instance_id in line)
        assert attempt.address in row and f"${attempt.billed_seconds / 3600 * attempt.price_per_hour:.4f}" in row


def first_steps_between(world: Spotrun, start: float, end: float) -> list[str]:
    """The trainers' "first step ... done at T" lines with start < T < end: ranks training again."""
    logs = world.run("logs", "1").stdout
    assert FIRST_STEP.search(logs), "the trainers' first steps are not in the logs: the check below would be empty"
    return [f"rank {rank} step {step} at {at}" for rank, step, at in FIRST_STEP.findall(logs) if start < float(at) < end]


# A soak run (`make soak`, ~50 s): tests/control/test_controller_gang.py loses a node while the gang waits for a
# replacement, against the in-memory cloud; the test above loses two nodes end to end
@pytest.mark.soak
def test_a_node_lost_while_the_gang_restarts_is_replaced_too(spotrun, tmp_path):
    reference = reference_ddp(tmp_path, epochs=EPOCHS)
    spotrun.run("launch", str(ddp_job(tmp_path, epochs=EPOCHS)))
    wait_training(spotrun, -1, generation=1)

    spotrun.run("preempt", "1", "--node", "1")
    deadline = time.time() + 60
    while not any(a.node_rank == 1 and a.number > 3 for a in attempts(spotrun)):  # node 1's replacement is placed
        assert time.time() < deadline, spotrun.controller_log()
        time.sleep(0.1)
    spotrun.run("preempt", "1", "--node", "0")  # a survivor goes while the gang is restarting
    second_preempt = time.time()
    spotrun.wait_for(1, lambda r: r["preemptions"] == 2, what="the preemption during the restart")

    done = assert_done_and_exact(spotrun, reference)
    assert done["preemptions"] == 2
    runs = generations(spotrun)
    assert runs[0].end_reason == "interrupted" and runs[-1].end_reason == "succeeded"
    assert not first_steps_between(spotrun, runs[0].ended_at, second_preempt), "the ranks trained before the 2nd loss"
    last = {int(rank): attempt_id for rank, attempt_id in runs[-1].members.items()}
    numbers = {a.id: a.number for a in attempts(spotrun)}
    assert numbers[last[0]] > 3 and numbers[last[1]] > 3 and numbers[last[2]] == 3, "replace both lost, keep node 2"


# A soak run (`make soak`, ~60 s): tests/gang/test_gang_pieces.py wraps the command in torchrun and reads its exit
# codes, and tests/sdk/test_sdk_sharded_state.py runs ranks under torchrun
@pytest.mark.soak
def test_torchrun_launcher_runs_each_node_under_torchrun_and_resumes_exactly(spotrun, tmp_path):
    reference = reference_ddp(tmp_path, nodes=2, epochs=6)
    spotrun.run("launch", str(ddp_job(tmp_path, nodes=2, epochs=6, extra="distributed: {launcher: torchrun}")))
    wait_training(spotrun, -1, generation=1)
    spotrun.run("preempt", "1", "--node", "1")
    spotrun.wait_for(1, lambda r: r["preemptions"] == 1, what="the preemption")
    done = assert_done_and_exact(spotrun, reference)
    assert done["preemptions"] == 1
    logs = spotrun.run("logs", "1").stdout
    assert "──── attempt 1 · node 0 · spot" in logs and "──── attempt 2 · node 1 · spot" in logs
    assert "rank 1/2: starting at step 0 of 72 (launcher torchrun)" in logs
    assert "(launcher env)" not in logs
    # each stop told in a line, not in torchrun's traceback for the signal, which read like a crash (whether a node's
    # torchrun gets to say it stopped depends on the race with its ranks' failure once their peer is gone, and on
    # the notice's time left: tests/gang/test_gang_torchrun_output.py checks the line itself)
    assert "asking the command to checkpoint and stop" in logs and "SignalException" not in logs, logs


@pytest.mark.soak  # the SDK's sharded saves are tested in tests/sdk; the platform's side is DDP's, tested above
def test_fsdp_over_two_nodes_loses_the_master_and_resumes_from_every_ranks_shards_exactly(spotrun, tmp_path):
    reference = reference_ddp(tmp_path, nodes=2, epochs=6, parallel="fsdp")
    spotrun.run("launch", str(ddp_job(tmp_path, nodes=2, epochs=6, parallel="fsdp")))
    wait_training(spotrun, 10, generation=1)
    spotrun.run("preempt", "1", "--node", "0")
    spotrun.wait_for(1, lambda r: r["preemptions"] == 1, what="the preemption")
    done = assert_done_and_exact(spotrun, reference)
    assert done["preemptions"] == 1
    logs = spotrun.run("logs", "1").stdout
    resumed = re.findall(r"rank 1/2: starting at step (\d+) of 72", logs)
    assert len(resumed) == 2 and int(resumed[1]) > 10, resumed  # node 1 restarted from the shards, not from 0
    listed = spotrun.run("checkpoints", "list", "--job", "1", "--json").stdout
    assert "sharded" in listed
