"""Reading a pod (as the API's JSON) as the provider interface's InstanceInfo: its state, whether the spot node it
ran on was taken back, and how its scheduling is going.

A pod on a spot node ends through a disruption when the node goes: the kubelet's graceful node shutdown (GKE
Spot, and any node whose cloud shuts it down) ends it with reason "Terminated"; a node that vanished has its pods
deleted by the pod garbage collector; a drain (AWS's node termination handler, Karpenter's interruption handling)
evicts them. Since Kubernetes 1.26 each of these adds a DisruptionTarget condition saying which. A spot VM stopped
before its kubelet could end its pods, and recreated under the same name (GKE's managed instance groups do so),
leaves no such trace: the new kubelet finds none of the pod's containers, reports them ContainerStatusUnknown and
fails the pod (or refuses to admit it again, its GPUs not yet reported: UnexpectedAdmissionError, OutOf...). A
kubelet that only restarted on the same node does the same, so lost containers are a reclaim only where the node
says it went: gone, or its Node object made again since the pod was bound (GKE deletes the Node of a VM whose
instance changed, cloud-provider-gcp#368), or its machine booted again under the same Node object since then (the
kubelet's "Rebooted" event: a new boot id, which a kubelet restart keeps); the caller reads the node and its events
(`node_replaced`, `node_rebooted`). A pod evicted for the node's memory or disk pressure, or pushed out by a pod of
higher priority, was not reclaimed: it is lost; one the kubelet refused to admit, or evicted, before it could start
is a start failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from itertools import takewhile
from typing import Any

from spotrun.providers.base import InstanceInfo, InstanceState, Market
from spotrun.providers.kubernetes.naming import JOB_LABEL, MARKET_LABEL, TOKEN_ANNOTATION, instance_id

Pod = Mapping[str, Any]

NODE_SHUTDOWN_REASON = "Terminated"  # the kubelet's status.reason for a pod ended by a graceful node shutdown
# the kubelet's status.reason for a pod it refused to admit because its node was shutting down (no DisruptionTarget)
NODE_SHUTDOWN_REJECTED = "NodeShutdown"
NODE_SHUTDOWN_1_20 = "Shutdown"  # Kubernetes 1.20's status.reason for both, renamed in 1.21
NODE_SHUTDOWNS = frozenset({NODE_SHUTDOWN_REASON, NODE_SHUTDOWN_REJECTED, NODE_SHUTDOWN_1_20})
# How the kubelet reports a container it no longer finds (its node restarted or was recreated under the pod)
CONTAINER_LOST = "ContainerStatusUnknown"
# A pod being deleted whose containers should have stopped this long ago has no kubelet left to stop them: its node
# is gone (a spot VM stopped or deallocated while its Node object stays NotReady), and it never leaves Running.
KUBELET_GONE_AFTER = 300.0
# DisruptionTarget reasons that mean the node went (or was drained) rather than the pod's own fault
RECLAIM_DISRUPTIONS = frozenset({"TerminationByKubelet", "DeletionByPodGC", "DeletionByTaintManager", "EvictionByEvictionAPI"})
NODE_PRESSURE_REASON = "Evicted"  # the kubelet's status.reason for a node-pressure eviction (TerminationByKubelet too)
# The kubelet's event on its Node when the boot id it reads is not the Node's status.nodeInfo.bootID (its nodestatus
# MachineInfo setter): the machine booted again, rebooted or a new VM under the Node's name. A restarted kubelet on
# the same boot says nothing of the kind.
NODE_REBOOTED = "Rebooted"
# How the kubelet's rejectPod begins status.message, whatever its reason (UnexpectedAdmissionError, OutOf<resource>,
# NodeAffinity, and Evicted where the node is under pressure)
ADMISSION_REJECTED = "Pod was rejected"
# Events of the cluster's node provisioner about a pod that waits for a node
SCALING_UP = frozenset({"TriggeredScaleUp", "Nominated"})  # cluster-autoscaler; Karpenter
SCALE_UP_FAILED = "FailedScaleUp"  # the cloud could not give the node a scale-up asked for: refused
# No node group can take the pod; cluster-autoscaler says so at every loop, also while that lasts only a while (a
# group backing off after a failed scale-up, at its max size, not ready for scale-up): refused once it persists
NO_SCALE_UP = "NotTriggerScaleUp"
# A container the kubelet cannot start: the image cannot be pulled, the pod's config is wrong. The kubelet retries;
# the controller's boot timeout then ends the attempt as failed, not lost (InstanceInfo.start_failure).
START_FAILURES = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError",
})
# How a container that did not end by itself is reported (its node restarted under it, the OOM killer)
OUTSIDE_ENDS = frozenset({CONTAINER_LOST, "OOMKilled"})
_STATES: dict[str, InstanceState] = {
    "Pending": "pending", "Running": "running", "Succeeded": "terminated", "Failed": "terminated", "Unknown": "unknown",
}


def market_of(pod: Pod) -> Market:
    return "spot" if _labels(pod).get(MARKET_LABEL) == "spot" else "on-demand"


def state_of(pod: Pod, now: float | None = None) -> InstanceState:
    """A pod being deleted before it ever ran will never run: it counts as terminated; so does one still "Running"
    `KUBELET_GONE_AFTER` past its deletion's due time (`now`, epoch seconds, where the caller gives it)."""
    state = _STATES.get(_status(pod).get("phase", ""), "unknown")
    deleting = pod.get("metadata", {}).get("deletionTimestamp")
    if state == "pending" and deleting:
        return "terminated"
    due = timestamp(deleting)
    if state == "running" and now is not None and due is not None and now - due > KUBELET_GONE_AFTER:
        return "terminated"
    return state


def disruption_of(pod: Pod) -> str | None:
    """Why the cluster ended the pod, where it says: the DisruptionTarget condition's reason, else the kubelet's."""
    reason = _disruption_target(pod) or _status(pod).get("reason")
    return str(reason) if reason else None


def reclaimed(pod: Pod, now: float | None = None, node_replaced: bool = False) -> bool:
    """A spot pod that ended because its node went or was drained. `node_replaced`: whether its node is gone, made
    again or booted again since the pod was bound (`node_replaced()`, `node_rebooted()`), which alone tells a
    reclaim where its containers were lost without a word of why (`lost_with_its_node`)."""
    if not _ended_on_spot(pod, now) or _status(pod).get("reason") == NODE_PRESSURE_REASON:
        return False
    disruption = disruption_of(pod)
    if disruption in RECLAIM_DISRUPTIONS or disruption in NODE_SHUTDOWNS:
        return True
    return node_replaced and lost_with_its_node(pod, now)


def lost_with_its_node(pod: Pod, now: float | None = None) -> bool:
    """A spot pod whose kubelet no longer found its containers, with no DisruptionTarget: its node may have gone
    (recreated under it), or only its kubelet restarted. Whether it was reclaimed is the node's to tell."""
    return (_ended_on_spot(pod, now) and _status(pod).get("reason") != NODE_PRESSURE_REASON
            and _disruption_target(pod) is None and _containers_lost(pod))


def node_replaced(pod: Pod, node: Pod | None) -> bool:
    """Whether the node the pod was bound to is gone (`node` None: the API has none of its name) or is another,
    made after the pod was bound. A node takes pods only once Ready, some time after it is made: one made in the
    second the pod was bound was there before it."""
    bound = _bound_at(pod)
    if bound is None:
        return False
    if node is None:
        return True
    made = timestamp((node.get("metadata") or {}).get("creationTimestamp"))
    return made is not None and made > bound


def node_rebooted(pod: Pod, node_events: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the kubelet of the pod's node said, among `node_events` (its Node's), that the machine booted again
    after the pod was bound: a VM taken back and given again under the same Node object (or rebooted), not a
    kubelet that restarted. One said in the second the pod was bound was before it, as its containers ran since."""
    bound = _bound_at(pod)
    return bound is not None and any(
        event.get("reason") == NODE_REBOOTED and _event_time(event) > bound for event in node_events)


def pod_info(pod: Pod, now: float | None = None, node_replaced: bool = False) -> InstanceInfo:
    """The pod as an instance; `node_replaced` as `reclaimed` takes it."""
    metadata, status = pod.get("metadata", {}), _status(pod)
    state = state_of(pod, now)
    was_reclaimed = reclaimed(pod, now, node_replaced)
    detail: dict[str, Any] = {"phase": status.get("phase", "")}
    if pod.get("spec", {}).get("nodeName"):
        detail["node"] = pod["spec"]["nodeName"]
    why = _why(pod)
    if why:
        detail["reason"] = why
    if JOB_LABEL in _labels(pod):
        detail["job"] = _labels(pod)[JOB_LABEL]
    return InstanceInfo(
        instance_id=instance_id(metadata.get("namespace", ""), metadata.get("name", "")),
        zone=_node_selector(pod).get("topology.kubernetes.io/zone", ""),
        market=market_of(pod),
        instance_type=_node_selector(pod).get("node.kubernetes.io/instance-type", ""),
        state=state,
        reclaimed=was_reclaimed,
        address=status.get("podIP"),
        launched_at=timestamp(metadata.get("creationTimestamp")),
        terminated_at=ended_at(pod) if state == "terminated" else None,
        client_token=(metadata.get("annotations") or {}).get(TOKEN_ANNOTATION),
        detail=detail,
        start_failure=None if was_reclaimed else start_failure(pod),
        boot_began_at=scheduled_at(pod),
    )


def gone_info(namespace: str, name: str) -> InstanceInfo:
    """A pod the API no longer has (someone removed it with spotrun's finalizer, or spotrun let it go)."""
    return InstanceInfo(
        instance_id=instance_id(namespace, name), zone="", market="on-demand", instance_type="", state="terminated",
        detail={"phase": "NotFound", "reason": "pod no longer exists"},
    )


def unknown_info(namespace: str, name: str, why: str) -> InstanceInfo:
    """What describe answers when the API could not be asked: never "terminated" on a failed probe."""
    return InstanceInfo(
        instance_id=instance_id(namespace, name), zone="", market="spot", instance_type="", state="unknown",
        detail={"error": why},
    )


def ended_at(pod: Pod) -> float | None:
    """When the pod's containers ended, else when its deletion was due."""
    finished = [
        timestamp(((container.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for container in _status(pod).get("containerStatuses") or ()
    ]
    known = [moment for moment in finished if moment is not None]
    if known:
        return max(known)
    return timestamp(pod.get("metadata", {}).get("deletionTimestamp"))


def start_failure(pod: Pod) -> str | None:
    """Why the kubelet cannot start the pod's container (a bad image, a missing secret), while it says so; why it
    refused to admit the pod or evicted it (where the agent never reported in, the node cannot run it); or how
    the container ended by itself with an error (restartPolicy Never: the pod is then over), which, where the agent
    never reported in, is its bootstrap failing (no spotrun in the image and no index to install it from)."""
    for container in _status(pod).get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in START_FAILURES:
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    refused = _kubelet_refusal(pod)
    if refused:
        return refused
    if _status(pod).get("phase") == "Failed" and not disruption_of(pod) and not pod.get("metadata", {}).get("deletionTimestamp"):
        for container in _status(pod).get("containerStatuses") or ():
            terminated = (container.get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            # not a container killed from outside (a signal: 128+N, the OOM killer) or lost with its node
            if isinstance(code, int) and 0 < code < 128 and terminated.get("reason") not in OUTSIDE_ENDS:
                return f"container exited {terminated['exitCode']} ({terminated.get('reason', '')})".replace(" ()", "")
    return None


def is_scheduled(pod: Pod) -> bool:
    return bool(pod.get("spec", {}).get("nodeName")) or _condition(pod, "PodScheduled").get("status") == "True"


def scheduled_at(pod: Pod) -> float | None:
    """When a node took the pod (after a scale-up, as long after its launch as the node took to come)."""
    condition = _condition(pod, "PodScheduled")
    return timestamp(condition.get("lastTransitionTime")) if condition.get("status") == "True" else None


def unschedulable_message(pod: Pod) -> str | None:
    """The scheduler's message while it finds no node for the pod; None while it has not said so."""
    condition = _condition(pod, "PodScheduled")
    if condition.get("status") == "False" and condition.get("reason") == "Unschedulable":
        return str(condition.get("message") or "no node fits the pod")
    return None


def provisioner_verdict(events: Iterable[Mapping[str, Any]], *, now: float, patience: float) -> tuple[str, str] | None:
    """The node provisioner's last word on a waiting pod: ("scaling", message) when it is bringing a node up,
    ("refused", message) when it could not, or has said for `patience` seconds until `now` (epoch seconds) that it
    will not; ("declined", message) while it has said so for less; None when it said nothing."""
    said = sorted((event for event in events if event.get("reason") in SCALING_UP | {SCALE_UP_FAILED, NO_SCALE_UP}),
                  key=_event_time)
    if not said:
        return None
    last = said[-1]
    if last["reason"] in SCALING_UP:
        return "scaling", _words(last)
    # a failed scale-up stands, though the autoscaler then says it will not scale up (backing the group off)
    last_try = next((event for event in reversed(said) if event["reason"] != NO_SCALE_UP), last)
    if last_try["reason"] == SCALE_UP_FAILED:
        return "refused", _words(last_try)
    # since the first of the words that close the list: a change of them (a group entering its backoff) is another event
    declining = takewhile(lambda event: event["reason"] == NO_SCALE_UP, reversed(said))
    return ("declined" if now - min(map(_first_said, declining)) < patience else "refused"), _words(last)


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch of the API's RFC 3339 times ("2026-11-28T02:00:00Z")."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _why(pod: Pod) -> str | None:
    status = _status(pod)
    disruption = disruption_of(pod)
    message = status.get("message") or unschedulable_message(pod)
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        waiting = (container.get("state") or {}).get("waiting")
        if terminated and not message:
            message = f"container exited {terminated.get('exitCode')} ({terminated.get('reason', '')})"
        elif waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            message = f"{waiting.get('reason')}: {waiting.get('message', '')}"
    parts = [part for part in (disruption, message) if part]
    return ": ".join(parts) if parts else None


def _kubelet_refusal(pod: Pod) -> str | None:
    """The kubelet's reason and message for a pod it failed without running it to its end: refused at admission
    (rejectPod), or evicted for its node's pressure."""
    status = _status(pod)
    reason, message = status.get("reason"), str(status.get("message") or "").strip()
    if status.get("phase") != "Failed" or not reason or reason in NODE_SHUTDOWNS:
        return None
    if reason == NODE_PRESSURE_REASON or message.startswith(ADMISSION_REJECTED):
        return f"{reason}: {message}".rstrip(": ")
    return None


def _bound_at(pod: Pod) -> float | None:
    """When the pod was bound to its node; None for a pod never bound."""
    if not pod.get("spec", {}).get("nodeName"):
        return None
    return scheduled_at(pod) or timestamp(_status(pod).get("startTime"))


def _ended_on_spot(pod: Pod, now: float | None) -> bool:
    return market_of(pod) == "spot" and state_of(pod, now) == "terminated"


def _disruption_target(pod: Pod) -> str | None:
    for condition in _status(pod).get("conditions") or ():
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return str(condition.get("reason") or "DisruptionTarget")
    return None


def _containers_lost(pod: Pod) -> bool:
    return any(((container.get("state") or {}).get("terminated") or {}).get("reason") == CONTAINER_LOST
               for container in _status(pod).get("containerStatuses") or ())


def _event_time(event: Mapping[str, Any]) -> float:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        moment = timestamp(event.get(key))
        if moment is not None:
            return moment
    return timestamp((event.get("metadata") or {}).get("creationTimestamp")) or 0.0


def _words(event: Mapping[str, Any]) -> str:
    return f"{event['reason']}: {event.get('message', '')}"


def _first_said(event: Mapping[str, Any]) -> float:
    """When the event was first said (a repeated event keeps its firstTimestamp and counts the repeats)."""
    created = (event.get("metadata") or {}).get("creationTimestamp")
    moments = (event.get("firstTimestamp"), event.get("eventTime"), created)
    return next((moment for moment in map(timestamp, moments) if moment is not None), _event_time(event))


def _condition(pod: Pod, kind: str) -> Mapping[str, Any]:
    return next((c for c in _status(pod).get("conditions") or () if c.get("type") == kind), {})


def _status(pod: Pod) -> Mapping[str, Any]:
    return pod.get("status") or {}


def _labels(pod: Pod) -> Mapping[str, str]:
    return pod.get("metadata", {}).get("labels") or {}


def _node_selector(pod: Pod) -> Mapping[str, str]:
    return pod.get("spec", {}).get("nodeSelector") or {}
