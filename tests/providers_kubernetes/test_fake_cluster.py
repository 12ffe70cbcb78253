"""The fake cluster (tests/fakes_k8s) driven through the official client: the provider's tests trust it, so here
it is checked that the client deserializes what it serves and that the lifecycle behaves as a cluster's does."""

from __future__ import annotations

import json
import sys

import pytest
from fakes_k8s import ProcessRunner
from fakes_k8s.selectors import quantity
from kubernetes import client
from kubernetes.client.rest import ApiException

GPU_NODE = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def pod_body(name: str, command: list[str] | None = None, gpus: int = 0, **spec: object) -> dict:
    container = {"name": "trainer", "image": "python:3.12", "command": command or ["sleep", "60"],
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}
    return {"metadata": {"name": name, "labels": {"spotrun/job": "7"}},
            "spec": {"containers": [container], "restartPolicy": "Never", **spec}}


def wait_phase(core_v1: client.CoreV1Api, k8s, name: str, phase: str) -> client.V1Pod:
    k8s.cluster.wait_for(lambda: (k8s.cluster.pod("default", name) or {}).get("status", {}).get("phase") == phase)
    return core_v1.read_namespaced_pod(name, "default")


def reasons(core_v1: client.CoreV1Api, name: str) -> dict[str, client.CoreV1Event]:
    selector = f"involvedObject.name={name},involvedObject.kind=Pod"
    return {event.reason: event for event in core_v1.list_namespaced_event("default", field_selector=selector).items}


def test_a_pod_runs_and_exits_through_the_client(core_v1, k8s):
    k8s.cluster.add_node("spot-1", labels={"karpenter.sh/capacity-type": "spot"}, allocatable=GPU_NODE)
    core_v1.create_namespaced_pod("default", pod_body("job-7", gpus=1))
    listed = core_v1.list_namespaced_pod("default", label_selector="spotrun/job=7,!other", field_selector="metadata.name=job-7")
    assert [p.metadata.name for p in listed.items] == ["job-7"]
    assert core_v1.list_namespaced_pod("default", label_selector="spotrun/job in (8)").items == []
    running = wait_phase(core_v1, k8s, "job-7", "Running")
    assert running.spec.node_name == "spot-1" and running.status.pod_ip == "127.0.0.1"
    assert running.status.container_statuses[0].state.running.started_at.tzinfo is not None
    k8s.cluster.exit_container("default", "job-7", 3)
    failed = wait_phase(core_v1, k8s, "job-7", "Failed")
    assert failed.status.container_statuses[0].state.terminated.exit_code == 3
    assert failed.status.container_statuses[0].state.terminated.reason == "Error"
    assert {"Scheduled", "Started"} <= set(reasons(core_v1, "job-7"))
    spot = core_v1.list_node(label_selector="karpenter.sh/capacity-type=spot").items
    assert [n.metadata.name for n in spot] == ["spot-1"] and spot[0].status.allocatable["nvidia.com/gpu"] == "1"


def test_errors_are_status_replies(core_v1, k8s):
    with pytest.raises(ApiException) as missing:
        core_v1.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404 and json.loads(missing.value.body)["reason"] == "NotFound"
    created = core_v1.create_namespaced_pod("default", pod_body("job-1")).metadata.resource_version
    for body, namespace, status in [(pod_body("job-1"), "default", 409), (pod_body("Job_1"), "default", 422),
                                    ({"metadata": {"name": "x"}, "spec": {"containers": []}}, "default", 422),
                                    (pod_body("job-2"), "elsewhere", 404)]:
        with pytest.raises(ApiException) as refused:
            core_v1.create_namespaced_pod(namespace, body)
        assert refused.value.status == status and json.loads(refused.value.body)["kind"] == "Status"
    core_v1.patch_namespaced_pod("job-1", "default", {"metadata": {"labels": {"a": "b"}}},
                                 _content_type="application/merge-patch+json")  # the pod changes: `created` is stale
    with pytest.raises(ApiException) as conflict:
        core_v1.patch_namespaced_pod("job-1", "default", {"metadata": {"resourceVersion": created}},
                                     _content_type="application/merge-patch+json")
    assert conflict.value.status == 409 and json.loads(conflict.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as unsupported:
        core_v1.patch_namespaced_pod("job-1", "default", {}, _content_type="application/strategic-merge-patch+json")
    assert unsupported.value.status == 415
    for header in ("Bearer other", k8s.token):  # a wrong token; the right one without "Bearer "
        with pytest.raises(ApiException) as unauthorized:
            configuration = client.Configuration(k8s.url, api_key={"authorization": header})
            client.CoreV1Api(client.ApiClient(configuration)).list_node()
        assert unauthorized.value.status == 401


def test_the_fake_reads_resource_quantities_as_the_api_server_does():
    assert [quantity(text) for text in ("4", "500m", "2Ki", "1e3", "1E", "1Pi")] == [4, 0.5, 2048, 1e3, 1e18, 2**50]
    with pytest.raises(ValueError, match="quantities must match"):
        quantity("1ki")


def test_the_scheduler_explains_what_does_not_fit_and_honours_taints(core_v1, k8s):
    for name in ("cpu-1", "cpu-2"):
        k8s.cluster.add_node(name, labels={"pool": "spot"}, allocatable={"cpu": "8", "memory": "32Gi"})
    k8s.cluster.add_node("gpu-spot", labels={"pool": "spot"}, taints=[SPOT_TAINT], allocatable=GPU_NODE)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["spot"]}]}]}}}
    core_v1.create_namespaced_pod("default", pod_body("untolerated", gpus=1))
    core_v1.create_namespaced_pod("default", pod_body("picky", nodeSelector={"pool": "on-demand"},
                                                      tolerations=[{"operator": "Exists"}]))
    core_v1.create_namespaced_pod("default", pod_body("tolerant", gpus=1, affinity=affinity, tolerations=[
        {"key": "cloud.google.com/gke-spot", "operator": "Exists"}]))
    assert wait_phase(core_v1, k8s, "tolerant", "Running").spec.node_name == "gpu-spot"
    core_v1.create_namespaced_pod("default", pod_body("second", gpus=1, tolerations=[{"operator": "Exists"}]))
    expected = {
        "untolerated": "1 node(s) had untolerated taint {cloud.google.com/gke-spot: true}, 2 Insufficient nvidia.com/gpu",
        "picky": "3 node(s) didn't match Pod's node affinity/selector", "second": "3 Insufficient nvidia.com/gpu"}
    for name, why in expected.items():
        k8s.cluster.wait_for(lambda: "FailedScheduling" in reasons(core_v1, name))
        scheduled = core_v1.read_namespaced_pod(name, "default").status.conditions[0]
        assert (scheduled.type, scheduled.status, scheduled.reason) == ("PodScheduled", "False", "Unschedulable")
        assert scheduled.message == f"0/3 nodes are available: {why}."
    k8s.cluster.step()
    assert reasons(core_v1, "picky")["FailedScheduling"].count == 1  # reported once, not every loop


def test_graceful_delete_waits_for_finalizers_and_collects_owned_secrets(core_v1, k8s):
    k8s.cluster.add_node("node-1")
    body = pod_body("job-3")
    body["metadata"]["finalizers"] = ["spotrun.dev/keep"]
    uid = core_v1.create_namespaced_pod("default", body).metadata.uid
    core_v1.create_namespaced_secret("default", {"metadata": {"name": "job-3-env", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "job-3", "uid": uid}]}, "stringData": {"TOKEN": "s3cret"}})
    wait_phase(core_v1, k8s, "job-3", "Running")
    deleting = core_v1.delete_namespaced_pod("job-3", "default", body=client.V1DeleteOptions(grace_period_seconds=5))
    assert deleting.metadata.deletion_timestamp is not None and deleting.metadata.deletion_grace_period_seconds == 5
    stopped = wait_phase(core_v1, k8s, "job-3", "Failed")  # the idle container exits 143 on SIGTERM
    assert stopped.status.container_statuses[0].state.terminated.exit_code == 143
    assert core_v1.delete_namespaced_pod("job-3", "default").metadata.deletion_grace_period_seconds == 5
    assert core_v1.read_namespaced_secret("job-3-env", "default").data == {"TOKEN": "czNjcmV0"}
    core_v1.patch_namespaced_pod("job-3", "default", {"metadata": {"finalizers": None}},
                                 _content_type="application/merge-patch+json")
    for read in (core_v1.read_namespaced_pod, core_v1.read_namespaced_secret):
        with pytest.raises(ApiException) as gone:
            read("job-3" if read == core_v1.read_namespaced_pod else "job-3-env", "default")
        assert gone.value.status == 404


def test_eviction_marks_the_disruption(core_v1, k8s):
    k8s.cluster.add_node("node-1")
    body = pod_body("job-4")
    body["metadata"]["finalizers"] = ["spotrun.dev/keep"]
    core_v1.create_namespaced_pod("default", body)
    wait_phase(core_v1, k8s, "job-4", "Running")
    core_v1.create_namespaced_pod_eviction("job-4", "default", client.V1Eviction(
        metadata=client.V1ObjectMeta(name="job-4"), delete_options=client.V1DeleteOptions(grace_period_seconds=0)))
    evicted = wait_phase(core_v1, k8s, "job-4", "Failed")
    target = [c for c in evicted.status.conditions if c.type == "DisruptionTarget"][0]
    assert (target.status, target.reason) == ("True", "EvictionByEvictionAPI")
    assert evicted.status.container_statuses[0].state.terminated.exit_code == 137


@pytest.mark.parametrize("how", ["shutdown", "vanish"])
def test_losing_a_node_fails_its_pods(core_v1, k8s, how):
    k8s.cluster.add_node("spot-1")
    for name in ("job-5", "job-6"):
        body = pod_body(name, terminationGracePeriodSeconds=1)
        body["metadata"]["finalizers"] = ["spotrun.dev/keep"] if name == "job-5" else []
        core_v1.create_namespaced_pod("default", body)
        wait_phase(core_v1, k8s, name, "Running")
    if how == "shutdown":
        assert k8s.cluster.shut_down_node("spot-1", grace=25).wait(2)
    else:
        k8s.cluster.delete_node("spot-1")
    assert core_v1.list_node().items == []
    pod = core_v1.read_namespaced_pod("job-5", "default")
    assert pod.status.phase == "Failed" and pod.metadata.deletion_timestamp is not None
    target = [c for c in pod.status.conditions if c.type == "DisruptionTarget"][0]
    assert target.reason == ("TerminationByKubelet" if how == "shutdown" else "DeletionByPodGC")
    if how == "shutdown":
        assert pod.status.reason == "Terminated" and "imminent node shutdown" in pod.status.message
    assert [p.metadata.name for p in core_v1.list_namespaced_pod("default").items] == ["job-5"]


def test_the_autoscaler_adds_nodes_from_stocked_groups(core_v1, k8s):
    group = k8s.cluster.add_node_group("gpu-spot", {"pool": "spot"}, allocatable=GPU_NODE, max_nodes=2)
    group.stocked = False
    core_v1.create_namespaced_pod("default", pod_body("job-8", gpus=1))
    core_v1.create_namespaced_pod("default", pod_body("job-9", gpus=4))
    k8s.cluster.wait_for(lambda: "FailedScaleUp" in reasons(core_v1, "job-8"))
    assert "out of resources" in reasons(core_v1, "job-8")["FailedScaleUp"].message
    group.stocked = True
    pod = wait_phase(core_v1, k8s, "job-8", "Running")
    assert pod.spec.node_name.startswith("gpu-spot-")
    assert reasons(core_v1, "job-8")["TriggeredScaleUp"].message == "pod triggered scale-up: [{gpu-spot 0->1 (max: 2)}]"
    assert reasons(core_v1, "job-9")["NotTriggerScaleUp"].message == (
        "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu")


def test_the_process_runner_runs_commands_with_the_pod_env(tmp_path, core_v1, k8s):
    k8s.cluster.runner = ProcessRunner(tmp_path)
    k8s.cluster.add_node("node-1")
    script = ("import os, subprocess, sys, time; open('/scratch/out', 'w').write(os.environ['TOKEN']);"
              "print(os.environ['POD'], os.environ['TOKEN'], flush=True);"
              "subprocess.Popen(['setsid', 'sleep', '300']); time.sleep(300)")
    body = pod_body("job-10", command=[sys.executable, "-c", script], volumes=[{"name": "scratch", "emptyDir": {}}])
    body["spec"]["containers"][0].update(
        envFrom=[{"secretRef": {"name": "job-10-env"}}], volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        env=[{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    core_v1.create_namespaced_pod("default", body)
    k8s.cluster.wait_for(lambda: "Failed" in reasons(core_v1, "job-10"))
    waiting = core_v1.read_namespaced_pod("job-10", "default").status.container_statuses[0].state.waiting
    assert waiting.reason == "CreateContainerConfigError" and "job-10-env" in waiting.message
    core_v1.create_namespaced_secret("default", {"metadata": {"name": "job-10-env"}, "stringData": {"TOKEN": "t0k"}})
    wait_phase(core_v1, k8s, "job-10", "Running")
    log = lambda: core_v1.read_namespaced_pod_log("job-10", "default", _preload_content=False).data.decode()  # noqa: E731
    k8s.cluster.wait_for(lambda: "job-10 t0k" in log())
    assert (k8s.cluster.runner.folder_of("default", "job-10") / "volumes" / "scratch" / "out").read_text() == "t0k"
    runner = k8s.cluster.runner
    marked = k8s.cluster.wait_for(lambda: (found := runner.processes("default", "job-10"))[1:] and found)
    core_v1.delete_namespaced_pod("job-10", "default", grace_period_seconds=1)
    k8s.cluster.wait_for(lambda: k8s.cluster.pod("default", "job-10") is None)
    assert len({p.pid for p in marked}) >= 2  # the container and its grandchild in a session of its own
    k8s.cluster.wait_for(lambda: runner.processes("default", "job-10") == [], timeout=3)
