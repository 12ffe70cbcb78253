"""Kubernetes end to end with no network: a spot job launched through the controller as a pod on the fake cluster
(tests/fakes_k8s), whose kubelet runs the pod's script as local processes. The spot node is shut down as GKE's
graceful node shutdown does: the agent, the container's first process, takes the kubelet's SIGTERM as its notice, the
trainer checkpoints, the pod ends and the node is gone. The controller, paused meanwhile, reads the reclaim from the
pod that spotrun's finalizer kept; the job resumes on a spot node elsewhere (past any try in the zone with no node) and ends with
the weights of an uninterrupted run. A two-pod gang (examples/ddp) loses one pod's node: only that pod is replaced.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from fakes_k8s import FakeCluster, FakeKubernetes, ProcessRunner
from spotrun.control import jobs
from spotrun.control.placement import price_for
from spotrun.providers.kubernetes import KubernetesProvider, KubernetesSettings
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Instance, Job, Store
from vm_emulation import ControlPlane
from vm_emulation.ddp import DDP, uninterrupted_ddp
from vm_emulation.digits import DIGITS, TRAINER_ENV
from vm_emulation.waiting import wait_until

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
TYPE = "p3.2xlarge"
NAMESPACE = "training"
GRACE = 10.0  # the node's shutdown grace; the trainer gets the job's notice_grace of it
STEP_SECONDS = 0.05
IMAGE_CHECK = f"{shlex.quote(sys.executable)} -c 'import spotrun'"  # the image has spotrun (this virtualenv)


def spot_node(cluster: FakeCluster, zone: str) -> str:
    name = f"spot-{zone[-1]}"
    labels = {"topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": TYPE,
              "karpenter.sh/capacity-type": "spot"}
    cluster.add_node(name, labels, allocatable={"cpu": "8", "memory": "61Gi", "nvidia.com/gpu": "1"})
    return name



@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeCluster, KubernetesProvider]]:
    monkeypatch.setenv("SPOTRUN_KUBERNETES_FLAVOR", "karpenter")  # priced as EC2 prices the nodes
    runner = ProcessRunner(tmp_path / "pods", {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                                               "OMP_NUM_THREADS": "1"})
    fake_cluster = FakeCluster(namespaces=(NAMESPACE,), runner=runner)
    with FakeKubernetes(fake_cluster) as k8s:
        settings = KubernetesSettings(
            flavor="karpenter", namespace=NAMESPACE, python=sys.executable, install_command=IMAGE_CHECK,
            schedule_timeout=1.0, poll_interval=0.05, call_timeout=5.0, zones=tuple(ZONES),
        )
        configuration = client.Configuration(host=k8s.url, api_key={"authorization": f"Bearer {k8s.token}"})
        yield fake_cluster, KubernetesProvider(settings, configuration=configuration)
        assert not fake_cluster.errors, fake_cluster.errors


def job_text() -> str:
    env = {**TRAINER_ENV, "STEP_SECONDS": str(STEP_SECONDS)}
    return f"""
name: digits-kubernetes
workdir: {DIGITS}
run: python train.py
env: {json.dumps(env)}
resources: {{cloud: kubernetes, instance_type: {TYPE}, accelerators: {{V100: 1}}}}
spot: {{zones: {json.dumps(ZONES)}, preemptions_before_fallback: 3, notice_grace: 8}}
checkpoint: {{sync_interval: 1s}}
"""


def attempts_of(store: Store, job_id: int) -> list[Attempt]:
    with store.session() as session:
        return sorted(session.get(Job, job_id).attempts, key=lambda a: a.number)


def test_a_spot_node_shut_down_under_a_pod_resumes_the_job_on_another_node(
    cluster, cloud_store, spotrun_home, uninterrupted_digits,
):
    fake, provider = cluster
    nodes = {zone: spot_node(fake, zone) for zone in ZONES[:2]}  # us-east-1c has no node: a launch there is refused
    store = cloud_store
    job_id = jobs.submit(store, parse_spec(job_text()), time.time(), prices=price_for)
    plane = ControlPlane(store, {"kubernetes": provider}.__getitem__, prices=price_for, heartbeat_timeout=20,
                         boot_timeout=60, agent_heartbeat_interval=0.3, backoff_base=1)

    def explain() -> str:
        rows = [(a.number, a.zone, a.state, a.end_reason, a.instance_id, a.checkpoint_step, a.notice_source)
                for a in attempts_of(store, job_id)]
        logs = "\n".join(f"== {p['metadata']['name']}\n{fake.runner.log_of(NAMESPACE, p['metadata']['name'])[-3000:]}"
                         for p in fake.pods)
        return f"attempts {rows}; tick errors {plane.tick_errors}\n{logs}"

    with plane:
        first = wait_until("the trainer's first checkpoint", lambda: next(
            (a for a in attempts_of(store, job_id) if a.state == "running" and a.checkpoint_step), None), 60, explain)
        node = nodes[first.zone]
        with plane.paused():
            fake.shut_down_node(node, grace=GRACE)
            uninterrupted_digits()  # starts it: it trains while the job is placed again and resumes
            fake.wait_node_gone(node, timeout=GRACE + 15)
            # The controller has not looked: the agent alone reported the notice and the trainer's exit.
            seen = attempts_of(store, job_id)[0]
            assert seen.notice_source == "sigterm", explain()
            assert seen.reported_outcome == "preempted" and seen.exit_code == 75, explain()
            pod_name = first.instance_id.split("/")[1]
            kept = fake.pod(NAMESPACE, pod_name)
            assert kept is not None and kept["status"]["phase"] == "Failed", "spotrun's finalizer keeps the ended pod"
        wait_until("the job's end", lambda: attempts_of(store, job_id)[-1].end_reason == "succeeded", 90, explain)
        wait_until("every pod gone", lambda: not fake.pods, 15, explain)
        assert not plane.tick_errors, explain()
        last = attempts_of(store, job_id)[-1]
        resumed_log = fake.runner.log_of(NAMESPACE, last.instance_id.split("/")[1])

    with store.session() as session:
        job = session.get(Job, job_id)
        assert (job.state, job.preemptions, job.restarts_on_error) == ("SUCCEEDED", 1, 0), explain()
        assert session.get(Instance, first.instance_id).reclaimed, "the controller did not read the pod's reclaim"
    attempts = attempts_of(store, job_id)
    reclaimed, *refused, finished = attempts
    assert reclaimed.end_reason == "preempted" and finished.end_reason == "succeeded"
    assert all(a.end_reason == "no_capacity" and a.instance_id is None for a in refused), explain()
    assert all(a.market == "spot" for a in attempts)
    other = next(zone for zone in ZONES[:2] if zone != first.zone)
    assert finished.zone == other, "a spot node was left only in the other zone"
    # priced as EC2 prices the node (the catalog's p3.2xlarge), billed per second of the pod's life
    assert {(a.price_per_hour, a.on_demand_price_per_hour) for a in (reclaimed, finished)} == {(0.9731, 3.06)}
    assert reclaimed.charged_seconds == reclaimed.billed_seconds > 0
    start = re.search(r"starting at step (\d+) of", resumed_log)
    assert start and int(start.group(1)) >= first.checkpoint_step > 0, f"the relaunch did not resume:\n{resumed_log[-2000:]}"
    final = json.loads((spotrun_home / "checkpoints" / f"{job_id}-digits-kubernetes" / "final.json").read_text())
    reference = uninterrupted_digits().result()
    assert (final["sha256"], final["steps"]) == (reference["sha256"], reference["steps"])


GANG_ENV = {"EPOCHS": "3", "CHECKPOINT_EVERY": "5"}


@pytest.fixture(scope="module")
def uninterrupted_pair(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return uninterrupted_ddp(tmp_path_factory.mktemp("ddp-reference"), 2, GANG_ENV)


def gang_job_text(checkpoints: Path) -> str:
    return f"""
name: ddp-kubernetes
workdir: {DDP}
run: python train.py
env: {json.dumps({**GANG_ENV, "STEP_SECONDS": str(STEP_SECONDS), "COLLECTIVE_TIMEOUT": "30"})}
resources: {{cloud: kubernetes, instance_type: {TYPE}, accelerators: {{V100: 1}}, nodes: 2}}
spot: {{zones: {json.dumps(ZONES[:1])}, preemptions_before_fallback: 3, notice_grace: 8}}
checkpoint: {{store: '{checkpoints.as_uri()}', sync_interval: 1s}}
"""


# A soak run (`make soak`, ~30 s): the provider's pods run end to end in the test above, and a gang replaces only
# its lost node in tests/control/test_controller_gang.py
@pytest.mark.soak
def test_a_two_pod_gang_loses_one_pods_node_and_only_that_pod_is_replaced(
    cluster, cloud_store, tmp_path, uninterrupted_pair,
):
    fake, provider = cluster
    for suffix in "xyz":  # three spot nodes in one zone: two for the gang, one for the replacement
        fake.add_node(f"spot-{suffix}", {"topology.kubernetes.io/zone": ZONES[0], "node.kubernetes.io/instance-type": TYPE,
                                         "karpenter.sh/capacity-type": "spot"},
                      allocatable={"cpu": "8", "memory": "61Gi", "nvidia.com/gpu": "1"})
    store = cloud_store
    job_id = jobs.submit(store, parse_spec(gang_job_text(tmp_path / "shared")), time.time(), prices=price_for)
    plane = ControlPlane(store, {"kubernetes": provider}.__getitem__, prices=price_for, heartbeat_timeout=20,
                         boot_timeout=60, agent_heartbeat_interval=0.3, backoff_base=1)

    def explain() -> str:
        rows = [(a.number, a.node_rank, a.state, a.end_reason, a.instance_id, a.checkpoint_step)
                for a in attempts_of(store, job_id)]
        logs = "\n".join(f"== {p['metadata']['name']}\n{fake.runner.log_of(NAMESPACE, p['metadata']['name'])[-2000:]}"
                         for p in fake.pods)
        return f"attempts {rows}; tick errors {plane.tick_errors}\n{logs}"

    with plane:
        wait_until("both ranks' first checkpoint", lambda: any(
            a.state == "running" and a.checkpoint_step for a in attempts_of(store, job_id)), 90, explain)
        lost = next(a for a in attempts_of(store, job_id) if a.node_rank == 1 and a.state == "running")
        lost_node = fake.pod(NAMESPACE, lost.instance_id.split("/")[1])["spec"]["nodeName"]
        fake.shut_down_node(lost_node, grace=GRACE)
        wait_until("the job's end", lambda: job_state(store, job_id) in ("SUCCEEDED", "FAILED"), 150, explain)
        assert job_state(store, job_id) == "SUCCEEDED", explain()
        assert not plane.tick_errors, explain()

    attempts = attempts_of(store, job_id)
    node_zero = [a for a in attempts if a.node_rank == 0 and a.instance_id]
    node_one = [a for a in attempts if a.node_rank == 1 and a.instance_id]
    assert len(node_zero) == 1, f"node 0's pod was kept: {explain()}"
    assert [a.end_reason for a in node_one] == ["preempted", "succeeded"], explain()
    final = json.loads((tmp_path / "shared" / "final.json").read_text())
    assert (final["sha256"], final["steps"]) == (uninterrupted_pair["sha256"], uninterrupted_pair["steps"])


def job_state(store: Store, job_id: int) -> str:
    with store.session() as session:
        return session.get(Job, job_id).state
