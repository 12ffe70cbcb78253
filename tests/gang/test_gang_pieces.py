"""The small pieces of multi-node jobs: the spec, submit checks, the agent's rendezvous settings and commands,
how a generation's end is classified."""

from __future__ import annotations

import logging
import shlex
import sys
from types import SimpleNamespace

import pytest

from spotrun.agent.config import GangConfig
from spotrun.agent.gang import (
    GangAgent, GangOrders, GenerationOrder, MalformedOrder, node_command, rendezvous_environment,
)
from spotrun.control import jobs
from spotrun.control.gang import generation_end_reason
from spotrun.spec import SpecError, parse_spec

ORDER = GenerationOrder(number=2, state="running", master_addr="127.0.0.7", master_port=29511, node_rank=1, nnodes=3)
WIRE = {"generation": 2, "state": "running", "master_addr": "127.0.0.7", "master_port": 29511, "node_rank": 1,
        "nnodes": 3}  # ORDER as a heartbeat answer carries it


def test_env_launcher_sets_torch_distributed_variables_for_one_process_per_node() -> None:
    env = rendezvous_environment(GangConfig(nnodes=3, node_rank=1), ORDER)
    assert env["MASTER_ADDR"] == "127.0.0.7" and env["MASTER_PORT"] == "29511"
    assert (env["WORLD_SIZE"], env["RANK"], env["LOCAL_RANK"], env["NODE_RANK"]) == ("3", "1", "0", "1")
    assert env["SPOTRUN_GENERATION"] == "2"
    assert node_command("python train.py --lr 0.1", GangConfig(nnodes=3, node_rank=1), ORDER) == "python train.py --lr 0.1"


def test_torchrun_launcher_wraps_the_command_and_leaves_ranks_to_torchrun() -> None:
    gang = GangConfig(nnodes=3, node_rank=1, launcher="torchrun", procs_per_node=4)
    env = rendezvous_environment(gang, ORDER)
    assert "RANK" not in env and "WORLD_SIZE" not in env and env["NODE_RANK"] == "1"
    argv = shlex.split(node_command("python train.py --lr 0.1", gang, ORDER))
    assert argv[:3] == [sys.executable, "-m", "spotrun.agent.torchrun_launch"]  # torchrun's own main, wrapped
    assert {"--nnodes=3", "--node-rank=1", "--nproc-per-node=4", "--master-addr=127.0.0.7", "--master-port=29511"} <= set(argv)
    assert argv[-7:] == ["--no-python", sys.executable, "-m", "spotrun.agent.rank_output", "bash", "-c",
                         "python train.py --lr 0.1"]


def test_orders_from_heartbeats_wake_the_agent_only_for_a_new_running_generation() -> None:
    orders = GangOrders()
    reply = {"gang": WIRE}
    orders.on_heartbeat_reply({"gang": None})
    assert orders.wait_for_new(after=0, timeout=0.01) is None
    orders.on_heartbeat_reply(reply)
    assert orders.wait_for_new(after=1, timeout=0.01) == ORDER
    assert orders.wait_for_new(after=2, timeout=0.01) is None  # already run
    orders.on_heartbeat_reply({"gang": {**reply["gang"], "state": "stopping"}})
    late = orders.wait_for_new(after=1, timeout=0.01)  # a node that comes late learns it missed generation 2
    assert late is not None and late.number == 2 and not late.running
    orders.on_heartbeat_reply({"gang": {"generation": "x"}})  # malformed: ignored, never a crash
    assert orders.current == late


def test_an_order_with_an_infinite_number_is_malformed_not_a_crash() -> None:
    """JSON's Infinity reached int(), whose OverflowError escaped the check for malformed orders."""
    orders = GangOrders()
    orders.on_heartbeat_reply({"gang": WIRE})
    orders.on_heartbeat_reply({"gang": {**WIRE, "master_port": float("inf")}})
    with pytest.raises(MalformedOrder, match="generation"):
        GenerationOrder.from_reply({**WIRE, "generation": float("inf")})
    assert orders.current == ORDER


@pytest.mark.parametrize(
    ("gone", "codes", "reason"),
    [
        ([1], {0: 75, 2: 75}, "interrupted"),
        ([], {0: 0, 1: 0, 2: 0}, "succeeded"),
        ([], {0: 75, 1: 0, 2: 75}, "stopped"),
        ([], {0: 1, 1: -15, 2: 75}, "failed"),
    ],
)
def test_a_generation_end_is_classified_by_losses_first_then_exit_codes(gone, codes, reason) -> None:
    assert generation_end_reason(gone, codes) == reason


def test_spec_refuses_several_processes_per_node_without_torchrun() -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec("run: python t.py\nresources: {nodes: 2}\ndistributed: {procs_per_node: 4}\n", "job.yaml")
    assert "distributed" in str(refused.value) and "torchrun" in str(refused.value)
    spec = parse_spec("run: python t.py\nresources: {nodes: 2}\ndistributed: {launcher: torchrun, procs_per_node: 4}\n", "j")
    assert spec.distributed.procs_per_node == 4 and spec.distributed.gang_timeout == 600.0


def test_a_multi_node_cloud_job_needs_shared_checkpoint_storage(store) -> None:
    text = "run: python t.py\nresources: {cloud: aws, instance_type: p3.2xlarge, nodes: 2}\n"
    with pytest.raises(SpecError) as refused:
        jobs.submit(store, parse_spec(text, "job.yaml"), now=0.0, source="job.yaml")
    assert "checkpoint.store" in str(refused.value)
    with store.session() as session:
        assert jobs.list_jobs(session) == []  # nothing stored
    shared = text + "checkpoint: {store: 's3://bucket/ckpt'}\n"
    assert jobs.submit(store, parse_spec(shared, "job.yaml"), now=0.0) == 1


def test_checkpoints_in_a_relative_folder_are_stored_absolute_locally_and_refused_on_a_cloud(store, tmp_path):
    """On the local cloud the folder is taken from the job file's (the instance runs in its own folder, deleted with
    it: a relative store there lost every checkpoint at a preemption); on a cloud it is refused."""
    local = "run: python t.py\ncheckpoint: {store: relstore}\n"
    job_id = jobs.submit(store, parse_spec(local, "job.yaml"), now=0.0, spec_dir=tmp_path)
    with store.session() as session:
        assert jobs.get_job(session, job_id).spec["checkpoint"]["store"] == str(tmp_path / "relstore")
    cloud = "run: python t.py\nresources: {cloud: aws, instance_type: p3.2xlarge}\ncheckpoint: {store: relstore}\n"
    with pytest.raises(SpecError) as refused:
        jobs.submit(store, parse_spec(cloud, "job.yaml"), now=0.0, source="job.yaml")
    [problem] = refused.value.problems
    assert problem.field == "checkpoint.store" and "relative path" in problem.message
    mounted = cloud.replace("relstore", "/mnt/shared/ckpt")
    assert jobs.submit(store, parse_spec(mounted, "job.yaml"), now=0.0) > job_id


def test_the_local_cloud_refuses_more_nodes_than_its_quota_and_a_workdir_that_is_not_there(store, tmp_path):
    text = "run: python t.py\nresources: {nodes: 17}\nworkdir: missing\n"
    with pytest.raises(SpecError) as refused:
        jobs.submit(store, parse_spec(text, "job.yaml"), now=0.0, spec_dir=tmp_path, source="job.yaml")
    assert [problem.field for problem in refused.value.problems] == ["resources.nodes", "workdir"]
    assert "at most 16 instances" in str(refused.value) and f"{tmp_path / 'missing'} is not a folder" in str(refused.value)
    with store.session() as session:
        assert jobs.list_jobs(session) == []
    (tmp_path / "missing").mkdir()
    assert jobs.submit(store, parse_spec(text.replace("17", "16"), "job.yaml"), now=0.0, spec_dir=tmp_path) == 1
    with pytest.raises(SpecError, match="resources.nodes"):
        parse_spec("run: x\nresources: {cloud: aws, instance_type: p3.2xlarge, nodes: 100000}\n", "job.yaml")


@pytest.mark.parametrize(("launcher", "code", "reported"), [
    ("torchrun", 1, 75),  # torchrun's answer to a worker's 75
    ("torchrun", 0, 0),
    ("torchrun", -9, -9),  # killed at the stop time: not saved
    ("env", 1, 1),  # the rank's own code says what happened
])
def test_a_stop_torchrun_ended_1_is_reported_as_saved(launcher, code, reported) -> None:
    """torchrun turns a worker's 75 into 1: a gang move counted as a failed command, against max_restarts_on_error."""
    agent = SimpleNamespace(gang=GangConfig(nnodes=2, node_rank=0, launcher=launcher))
    assert GangAgent._code_of_a_stop(agent, code) == reported  # type: ignore[arg-type]



@pytest.mark.parametrize(("bad", "named"), [
    ({**WIRE, "generation": "two"}, "generation"),
    ({key: value for key, value in WIRE.items() if key != "generation"}, "generation"),
    ({**WIRE, "node_rank": 3}, "node_rank"),
    ({**WIRE, "state": "paused"}, "state"),
    ({**WIRE, "master_port": float("inf")}, "master_port"),
    ("running", "gang"),
])
def test_a_malformed_order_keeps_the_running_generation_and_says_what_is_wrong(bad, named, caplog) -> None:
    """A malformed order (a controller bug, a version skew) was taken for "no order", which stops the generation."""
    orders = GangOrders()
    orders.on_heartbeat_reply({"gang": WIRE})
    with caplog.at_level(logging.WARNING, logger="spotrun.agent.gang"):
        orders.on_heartbeat_reply({"gang": bad})
    assert orders.current == ORDER
    assert not GangAgent._generation_is_over(SimpleNamespace(orders=orders), ORDER)  # type: ignore[arg-type]
    assert [record.levelno for record in caplog.records] == [logging.WARNING]
    assert named in caplog.records[0].getMessage()


def test_a_malformed_order_is_warned_of_once_and_a_well_formed_one_still_stops(caplog) -> None:
    orders = GangOrders()
    orders.on_heartbeat_reply({"gang": WIRE})
    with caplog.at_level(logging.WARNING, logger="spotrun.agent.gang"):
        for _ in range(3):
            orders.on_heartbeat_reply({"gang": {**WIRE, "nnodes": "x"}})
        orders.on_heartbeat_reply({"gang": {**WIRE, "nnodes": 0}})
    assert len(caplog.records) == 2  # once per distinct bad order, not every heartbeat
    orders.on_heartbeat_reply({"gang": {**WIRE, "state": "stopping", "stop_by": 1e9}})
    assert GangAgent._generation_is_over(SimpleNamespace(orders=orders), ORDER)  # type: ignore[arg-type]
    orders.on_heartbeat_reply({"gang": None})  # a well-formed "no order": this node is not in the newest generation
    assert orders.current is None


def test_an_answer_that_says_nothing_of_the_gang_changes_nothing_and_warns_nothing(caplog) -> None:
    """The answer to an ended attempt carries `stop` and no `gang`: not a malformed order to warn of."""
    orders = GangOrders()
    orders.on_heartbeat_reply({"gang": WIRE})
    with caplog.at_level(logging.WARNING, logger="spotrun.agent.gang"):
        orders.on_heartbeat_reply({"ok": True, "stop": "attempt 3 has ended", "hold": True})
    assert orders.current == ORDER and not caplog.records
