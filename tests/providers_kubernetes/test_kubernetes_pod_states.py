"""Reading pods as the API describes them (JSON as the API server writes it): state, reclaims told from other
ends, scheduling, and the node provisioner's word."""

from __future__ import annotations

import pytest

from spotrun.providers.kubernetes.pods import (
    pod_info,
    provisioner_verdict,
    reclaimed,
    state_of,
    timestamp,
    unschedulable_message,
)


def pod(phase: str, market: str = "spot", conditions=(), reason: str | None = None, deleting: bool = False,
        finished: str | None = None) -> dict:
    status: dict = {"phase": phase, "conditions": list(conditions), "podIP": "10.0.3.7"}
    if reason:
        status["reason"] = reason
    if finished:
        status["containerStatuses"] = [{"name": "spotrun", "state": {"terminated": {"exitCode": 143, "finishedAt": finished}}}]
    metadata = {
        "name": "spotrun-sr-1-abc", "namespace": "ml", "creationTimestamp": "2026-11-28T02:00:00Z",
        "labels": {"spotrun.dev/market": market}, "annotations": {"spotrun.dev/client-token": "sr-1-abc"},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T02:10:00Z"
    spec = {"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1b", "node.kubernetes.io/instance-type": "g5.xlarge"}}
    return {"metadata": metadata, "spec": spec, "status": status}


def disruption(reason: str) -> dict:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "..."}


@pytest.mark.parametrize("ended, expected", [
    (pod("Failed", reason="Terminated"), True),  # graceful node shutdown (GKE Spot)
    (pod("Failed", conditions=[disruption("DeletionByPodGC")], deleting=True), True),  # the node vanished
    (pod("Failed", conditions=[disruption("EvictionByEvictionAPI")], deleting=True), True),  # a drain of the node
    (pod("Failed", conditions=[disruption("DeletionByTaintManager")], deleting=True), True),
    (pod("Failed", conditions=[disruption("TerminationByKubelet")], reason="Evicted"), False),  # memory pressure
    (pod("Failed", conditions=[disruption("PreemptionByScheduler")], deleting=True), False),  # a pod of higher priority
    (pod("Failed", "on-demand", reason="Terminated"), False),  # only spot is reclaimed
    (pod("Succeeded"), False),
    (pod("Running", conditions=[disruption("EvictionByEvictionAPI")], deleting=True), False),  # not ended yet
])
def test_a_reclaim_is_a_spot_pod_ended_because_its_node_went(ended, expected):
    assert reclaimed(ended) is expected


def test_pod_info_of_a_reclaimed_pod():
    info = pod_info(pod("Failed", reason="Terminated", finished="2026-11-28T02:05:00Z"))
    assert (info.instance_id, info.zone, info.instance_type, info.market) == ("ml/spotrun-sr-1-abc", "us-east-1b", "g5.xlarge", "spot")
    assert (info.state, info.reclaimed, info.client_token, info.address) == ("terminated", True, "sr-1-abc", "10.0.3.7")
    assert info.terminated_at - info.launched_at == 300
    assert info.detail["reason"].startswith("Terminated")


def test_states():
    assert state_of(pod("Pending")) == "pending"
    assert state_of(pod("Pending", deleting=True)) == "terminated", "deleted before it ran: it never will"
    assert state_of(pod("Running", deleting=True)) == "running", "its agent is still saving within its grace"
    assert state_of(pod("Unknown")) == "unknown"


def test_scheduling_and_the_provisioner():
    waiting = pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                          "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])
    assert unschedulable_message(waiting) == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert unschedulable_message(pod("Pending")) is None
    events = [
        {"reason": "FailedScheduling", "message": "0/3 nodes", "lastTimestamp": "2026-11-28T02:00:01Z"},
        {"reason": "NotTriggerScaleUp", "message": "no node group fits", "lastTimestamp": "2026-11-28T02:00:02Z"},
    ]
    later = timestamp("2026-11-28T02:05:00Z")
    assert provisioner_verdict(events, now=later, patience=180) == ("refused", "NotTriggerScaleUp: no node group fits")
    events.append({"reason": "TriggeredScaleUp", "message": "pool 0->1", "lastTimestamp": "2026-11-28T02:00:09Z"})
    assert provisioner_verdict(events, now=later, patience=180)[0] == "scaling"
    assert provisioner_verdict(events[:1], now=later, patience=180) is None


def test_the_autoscaler_not_scaling_up_is_a_refusal_only_once_it_persists():
    # cluster-autoscaler says NotTriggerScaleUp at every loop while no node group can take the pod, also for a
    # while only: a group backing off after a failed scale-up, at its max size, not ready for scale-up
    events = [{"reason": "NotTriggerScaleUp", "message": "pod didn't trigger scale-up: 1 max node group size reached",
               "firstTimestamp": "2026-11-28T02:00:00Z", "lastTimestamp": "2026-11-28T02:01:30Z", "count": 10}]
    assert provisioner_verdict(events, now=timestamp("2026-11-28T02:01:31Z"), patience=180)[0] == "declined"
    assert provisioner_verdict(events, now=timestamp("2026-11-28T02:03:01Z"), patience=180)[0] == "refused"
    failed = [{"reason": "FailedScaleUp", "message": "out of resources", "firstTimestamp": "2026-11-28T02:00:00Z",
               "lastTimestamp": "2026-11-28T02:00:00Z"}]
    assert provisioner_verdict(failed, now=timestamp("2026-11-28T02:00:01Z"), patience=180)[0] == "refused"
    # the group backs off after its scale-up failed: the failure stands
    backoff = {**events[0], "firstTimestamp": "2026-11-28T02:00:10Z", "lastTimestamp": "2026-11-28T02:00:20Z"}
    backing_off = [{"reason": "TriggeredScaleUp", "message": "pool 0->1", "lastTimestamp": "2026-11-28T01:59:00Z"},
                   *failed, backoff]
    assert provisioner_verdict(backing_off, now=timestamp("2026-11-28T02:00:21Z"), patience=180) == (
        "refused", "FailedScaleUp: out of resources")


def test_the_autoscaler_not_scaling_up_persists_through_a_change_of_its_words():
    # a node group entering its backoff changes the message: another event, first said later, though the
    # autoscaler has declined the pod since the first one
    events = [
        {"reason": "NotTriggerScaleUp", "message": "pod didn't trigger scale-up: 1 max node group size reached",
         "firstTimestamp": "2026-11-28T02:00:00Z", "lastTimestamp": "2026-11-28T02:01:50Z", "count": 12},
        {"reason": "NotTriggerScaleUp", "message": "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
         "firstTimestamp": "2026-11-28T02:02:00Z", "lastTimestamp": "2026-11-28T02:03:00Z", "count": 7},
    ]
    assert provisioner_verdict(events, now=timestamp("2026-11-28T02:03:01Z"), patience=180) == (
        "refused", "NotTriggerScaleUp: pod didn't trigger scale-up: 1 in backoff after failed scale-up")
    # ... but a scale-up in between starts the wait again
    scaling = {"reason": "TriggeredScaleUp", "message": "pool 1->2", "lastTimestamp": "2026-11-28T02:01:55Z"}
    assert provisioner_verdict([*events, scaling], now=timestamp("2026-11-28T02:03:01Z"), patience=180)[0] == "declined"


def test_a_container_that_cannot_start_is_told_apart_from_one_still_pulling():
    pulling = pod("Pending")
    pulling["status"]["containerStatuses"] = [{"name": "spotrun", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    assert pod_info(pulling).start_failure is None
    stuck = pod("Pending")
    stuck["status"]["containerStatuses"] = [{"name": "spotrun", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "acme/trian:1"'}}}]
    info = pod_info(stuck)
    assert info.state == "pending"
    assert info.start_failure == 'ImagePullBackOff: Back-off pulling image "acme/trian:1"'
