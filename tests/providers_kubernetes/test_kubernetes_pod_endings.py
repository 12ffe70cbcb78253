"""Pods as the API server writes them in situations of real spot clusters, read by pod_info; manifests."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from spotrun.providers.base import LaunchRequest
from spotrun.providers.kubernetes import KubernetesSettings
from spotrun.providers.kubernetes.body import pod_manifest
from spotrun.providers.kubernetes.pods import pod_info


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


def test_a_spot_pod_whose_node_was_recreated_under_it_is_a_reclaim():
    # GKE: the preempted spot VM is recreated under the same name before its pods were ended gracefully; the new
    # kubelet finds none of the pod's containers (kubelet's ContainerStatusUnknown, exit 137) and fails the pod,
    # with no DisruptionTarget condition and no status reason
    recreated = spot_pod("Failed", containerStatuses=[LOST_CONTAINER])
    assert pod_info(recreated).reclaimed
    on_demand = spot_pod("Failed", containerStatuses=[LOST_CONTAINER])
    on_demand["metadata"]["labels"]["spotrun.dev/market"] = "on-demand"
    assert not pod_info(on_demand).reclaimed
    evicted_for_disk = spot_pod("Failed", reason="Evicted", containerStatuses=[LOST_CONTAINER], conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}])
    assert not pod_info(evicted_for_disk).reclaimed
    preempted_by_priority = spot_pod("Failed", containerStatuses=[LOST_CONTAINER], conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}])
    assert not pod_info(preempted_by_priority).reclaimed


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
