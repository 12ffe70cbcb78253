"""Pods as the API server writes them in situations of real spot clusters, read by pod_info; manifests."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from spotrun.providers.base import LaunchRequest
from spotrun.providers.kubernetes import KubernetesSettings
from spotrun.providers.kubernetes.body import pod_manifest
from spotrun.providers.kubernetes.pods import node_rebooted, node_replaced, pod_info


def iso(offset: float = 0.0) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


def spot_pod(phase: str, **status) -> dict:
    return {
        "metadata": {"name": "spotrun-sr-1-abc", "namespace": "ml", "creationTimestamp": iso(-3600),
                     "labels": {"spotrun.dev/market": "spot"}, "annotations": {"spotrun.dev/client-token": "sr-1-abc"}},
        "spec": {"nodeName": "gke-spot-1", "nodeSelector": {"topology.kubernetes.io/zone": "us-central1-a"}},
        "status": {"phase": phase, **status},
    }


def test_a_pod_the_kubelet_rejects_because_its_spot_node_is_shutting_down_is_a_reclaim():
    # kubelet nodeshutdown manager's admission: Reason "NodeShutdown", Message "Pod was rejected as the node is
    # shutting down." (nodeShutdownNotAdmittedReason); no DisruptionTarget condition is added
    rejected = spot_pod("Failed", reason="NodeShutdown", message="Pod was rejected as the node is shutting down.")
    info = pod_info(rejected)
    assert info.reclaimed


LOST_CONTAINER = {"name": "spotrun", "state": {"terminated": {
    "reason": "ContainerStatusUnknown", "message": "The container could not be located when the pod was terminated",
    "exitCode": 137}}}


def bound(pod: dict, offset: float) -> dict:
    """The pod as the scheduler bound it `offset` seconds from now."""
    pod["status"].setdefault("conditions", []).append(
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(offset)})
    return pod


def node_made(offset: float) -> dict:
    return {"metadata": {"name": "gke-spot-1", "uid": "n-1", "creationTimestamp": iso(offset)}}


def test_a_spot_pod_whose_node_was_recreated_under_it_is_a_reclaim():
    # GKE: the preempted spot VM is recreated under the same name before its pods were ended gracefully, and its
    # Node object made again (cloud-provider-gcp#368); the new kubelet finds none of the pod's containers
    # (kubelet's ContainerStatusUnknown, exit 137) and fails the pod, with no DisruptionTarget and no status reason
    recreated = spot_pod("Failed", containerStatuses=[LOST_CONTAINER])
    assert pod_info(recreated, node_replaced=True).reclaimed
    assert pod_info(recreated, node_replaced=True).start_failure is None
    on_demand = spot_pod("Failed", containerStatuses=[LOST_CONTAINER])
    on_demand["metadata"]["labels"]["spotrun.dev/market"] = "on-demand"
    assert not pod_info(on_demand, node_replaced=True).reclaimed
    evicted_for_disk = spot_pod("Failed", reason="Evicted", containerStatuses=[LOST_CONTAINER], conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}])
    assert not pod_info(evicted_for_disk, node_replaced=True).reclaimed
    preempted_by_priority = spot_pod("Failed", containerStatuses=[LOST_CONTAINER], conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}])
    assert not pod_info(preempted_by_priority, node_replaced=True).reclaimed


# kubelet's rejectPod after a restart of the kubelet alone: its device plugin has not registered again yet
# (kubernetes#124345, #117955); TerminatePod then marks the containers that had run ContainerStatusUnknown
READMISSION_REFUSED = {
    "reason": "UnexpectedAdmissionError",
    "message": "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy "
               "devices nvidia.com/gpu, which is unexpected",
}


def test_lost_containers_on_a_node_that_is_still_the_same_are_not_a_reclaim():
    # the kubelet restarted (or the VM rebooted) under the same Node object: nothing says the cloud took it back
    restarted = spot_pod("Failed", containerStatuses=[LOST_CONTAINER])
    assert not pod_info(restarted).reclaimed
    refused_again = spot_pod("Failed", containerStatuses=[LOST_CONTAINER], **READMISSION_REFUSED)
    info = pod_info(refused_again)
    assert not info.reclaimed
    assert info.start_failure == f"UnexpectedAdmissionError: {READMISSION_REFUSED['message']}"
    # on a node made again since the pod was bound, whatever its new kubelet then said: the node went
    assert pod_info(refused_again, node_replaced=True).reclaimed


def test_the_node_is_replaced_when_it_is_gone_or_made_again_since_the_pod_was_bound():
    pod = bound(spot_pod("Failed", containerStatuses=[LOST_CONTAINER]), -3600)
    assert node_replaced(pod, None)
    assert node_replaced(pod, node_made(-60))
    assert not node_replaced(pod, node_made(-7200))
    assert not node_replaced(pod, node_made(-3600)), "a node is Ready, and can take a pod, only after it is made"
    assert not node_replaced(spot_pod("Failed", containerStatuses=[LOST_CONTAINER]), node_made(-60)), \
        "never bound: no node of its own went"


def node_event(reason: str, offset: float, message: str = "") -> dict:
    """An event the kubelet recorded about its Node `offset` seconds from now (core/v1, as client-go's recorder)."""
    return {"involvedObject": {"kind": "Node", "name": "gke-spot-1", "uid": "gke-spot-1"}, "reason": reason,
            "message": message, "type": "Warning", "count": 1, "firstTimestamp": iso(offset),
            "lastTimestamp": iso(offset)}


def test_the_node_was_rebooted_when_its_kubelet_said_so_after_the_pod_was_bound():
    # kubelet's nodestatus MachineInfo setter: "Rebooted" when the boot id it reads differs from the Node's
    pod = bound(spot_pod("Failed", containerStatuses=[LOST_CONTAINER]), -3600)
    rebooted = node_event("Rebooted", -60, "Node gke-spot-1 has been rebooted, boot id: 6d2c...")
    assert node_rebooted(pod, [node_event("Starting", -60), rebooted])
    assert not node_rebooted(pod, [node_event("Starting", -60)]), "a kubelet that restarted keeps the boot id"
    assert not node_rebooted(pod, [node_event("Rebooted", -7200)]), "rebooted before the pod was bound"
    assert not node_rebooted(pod, [node_event("Rebooted", -3600)]), "in the second it was bound: before it"
    assert not node_rebooted(spot_pod("Failed", containerStatuses=[LOST_CONTAINER]), [rebooted]), "never bound"


def test_a_pod_the_kubelet_refuses_to_admit_is_a_start_failure_not_a_reclaim():
    # a fresh node whose device plugin has not reported its GPUs yet (kubelet's canAdmitPod: "OutOf" + resource);
    # the containers never ran, so the kubelet leaves their statuses as they were
    refused = spot_pod("Failed", reason="OutOfnvidia.com/gpu", message=(
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0"))
    assert pod_info(refused).start_failure.startswith(
        "OutOfnvidia.com/gpu: Pod was rejected: Node didn't have enough resource")
    assert not pod_info(refused, node_replaced=True).reclaimed, "its containers never ran: none was lost with a node"


def test_a_pod_evicted_for_the_nodes_pressure_is_a_start_failure_not_a_reclaim():
    evicted = spot_pod("Failed", reason="Evicted", message="The node was low on resource: ephemeral-storage. ",
                       conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}],
                       containerStatuses=[{"name": "spotrun", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}])
    info = pod_info(evicted)
    assert not info.reclaimed
    assert info.start_failure == "Evicted: The node was low on resource: ephemeral-storage."


def test_a_pod_ended_by_the_graceful_node_shutdown_of_kubernetes_1_20_is_a_reclaim():
    # the kubelet's nodeshutdown manager of 1.20 wrote Reason "Shutdown" (renamed "Terminated" in 1.21)
    shut_down = spot_pod("Failed", reason="Shutdown", message="Node is shutting, evicting pods")
    assert pod_info(shut_down).reclaimed


def test_a_pod_whose_node_vanished_without_being_deleted_is_not_running_forever():
    # The spot VM is gone, its Node object stays NotReady (kubelet dead): the taint manager deletes the pod after
    # tolerationSeconds (300) and marks it DisruptionTarget/DeletionByTaintManager; no kubelet ever ends it, so
    # its phase stays Running with a deletionTimestamp long past.
    pod = spot_pod("Running", conditions=[
        {"type": "Ready", "status": "False"},
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint"}])
    pod["metadata"]["deletionTimestamp"] = iso(-1800)  # its grace ended half an hour ago
    info = pod_info(pod, datetime.now(timezone.utc).timestamp())
    assert info.state == "terminated" and info.reclaimed


def request(notice_grace=30.0, accelerators=None):
    config = json.dumps({"job_id": 3, "token": "t", "notice_grace": notice_grace, "sync_margin": 2.0})
    return LaunchRequest(zone="us-east-1a", market="spot", instance_type="x", client_token="sr-3-aa",
                         user_data={"argv": ["python", "-m", "spotrun.agent"], "env": {"SPOTRUN_AGENT_CONFIG": config}},
                         accelerators=accelerators)


def test_the_pods_grace_covers_the_jobs_notice_grace():
    spec = pod_manifest(request(notice_grace=300.0), KubernetesSettings(flavor="karpenter"))["spec"]
    assert spec["terminationGracePeriodSeconds"] >= 300 + 2


def test_an_amd_gpu_is_asked_for_as_an_amd_gpu():
    limits = pod_manifest(request(accelerators={"MI300X": 1}), KubernetesSettings(flavor="karpenter"))["spec"]["containers"][0]["resources"]["limits"]
    assert "amd.com/gpu" in limits
