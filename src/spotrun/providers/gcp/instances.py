"""Reading GCE's description of an instance (and its operations) as the provider interface's InstanceInfo."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.cloud import compute_v1

from spotrun.providers.base import InstanceInfo, InstanceState, Market
from spotrun.providers.gcp.naming import JOB_LABEL, TOKEN_METADATA_KEY, instance_id, last_segment

# STOPPING/TERMINATED/SUSPENDED: the job's processes are gone (spotrun's Spot VMs are deleted when GCE
# reclaims them, so only a person or a preemption stops one); the controller ends the attempt.
# PENDING: a Flex-start VM waiting for capacity; PENDING_STOP: a graceful shutdown in progress (the guest still runs
# its shutdown, the agent its last backup); DEPROVISIONING: halted, its resources being torn down; STOPPED: halted.
_STATES: dict[str, InstanceState] = {
    "PENDING": "pending",
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "RUNNING": "running",
    "REPAIRING": "running",
    "PENDING_STOP": "running",
    "STOPPING": "terminated",
    "SUSPENDING": "terminated",
    "SUSPENDED": "terminated",
    "DEPROVISIONING": "terminated",
    "STOPPED": "terminated",
    "TERMINATED": "terminated",
}
PREEMPTED_OPERATION = "compute.instances.preempted"


def market_of(instance: compute_v1.Instance) -> Market:
    scheduling = instance.scheduling
    return "spot" if scheduling.provisioning_model == "SPOT" or scheduling.preemptible else "on-demand"


def instance_info(instance: compute_v1.Instance, preemption: compute_v1.Operation | None = None) -> InstanceInfo:
    """`preemption`: GCE's compute.instances.preempted operation for this instance, when there is one."""
    state = _STATES.get(instance.status, "unknown")
    if instance.status == "STOPPING" and preemption is not None:
        # preempted, its guest still shutting down (GCE gives it up to 30 s): the agent's final backup and exit
        # report run now, and deleting the instance as if it were gone would cut them short
        state = "running"
    detail: dict[str, Any] = {"gce_status": instance.status}
    if instance.status_message:
        detail["reason"] = instance.status_message
    if JOB_LABEL in instance.labels:
        detail["job"] = instance.labels[JOB_LABEL]
    if preemption is not None:
        detail["reason"] = "preempted by Compute Engine"
    ended_at = None
    if state == "terminated":
        ended_at = timestamp(preemption.end_time or preemption.insert_time) if preemption else None
        ended_at = ended_at or timestamp(instance.last_stop_timestamp)
    return InstanceInfo(
        instance_id=instance_id(last_segment(instance.zone), instance.name),
        zone=last_segment(instance.zone),
        market=market_of(instance),
        instance_type=last_segment(instance.machine_type),
        state=state,
        reclaimed=preemption is not None,
        address=_address(instance),
        launched_at=timestamp(instance.creation_timestamp),
        terminated_at=ended_at,
        client_token=metadata_value(instance, TOKEN_METADATA_KEY),
        detail=detail,
    )


def gone_info(zone: str, name: str, preemption: compute_v1.Operation | None) -> InstanceInfo:
    """An instance GCE no longer has: deleted after a preemption (`preemption` given) or by someone."""
    reason = "preempted by Compute Engine, then deleted" if preemption else "instance no longer exists (deleted)"
    return InstanceInfo(
        instance_id=instance_id(zone, name),
        zone=zone,
        # Only a spot instance is preempted; otherwise GCE no longer says which market it was.
        market="spot" if preemption else "on-demand",
        instance_type="",
        state="terminated",
        reclaimed=preemption is not None,
        terminated_at=timestamp(preemption.end_time or preemption.insert_time) if preemption else None,
        detail={"gce_status": "NOT_FOUND", "reason": reason},
    )


def unknown_info(zone: str, name: str, why: str) -> InstanceInfo:
    """What describe answers when GCE could not be asked: never "terminated" on a failed probe."""
    return InstanceInfo(
        instance_id=instance_id(zone, name), zone=zone, market="spot", instance_type="", state="unknown",
        detail={"error": why},
    )


def metadata_value(instance: compute_v1.Instance, key: str) -> str | None:
    return next((item.value for item in instance.metadata.items if item.key == key), None)


def timestamp(value: str) -> float | None:
    """Seconds since the epoch of GCE's RFC 3339 times ("2024-05-01T12:00:00.123-07:00")."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _address(instance: compute_v1.Instance) -> str | None:
    for interface in instance.network_interfaces:
        for access in interface.access_configs:
            if access.nat_i_p:
                return access.nat_i_p
    return next((interface.network_i_p for interface in instance.network_interfaces if interface.network_i_p), None)
