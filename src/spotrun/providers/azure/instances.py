"""Naming spotrun's VMs, and reading Azure's view of one (model + instance view) as the provider's InstanceInfo."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from enum import Enum
from typing import Any

from azure.mgmt.compute.models import InstanceViewStatus, VirtualMachine

from spotrun.providers.azure.errors import launch_refusal_for
from spotrun.providers.base import InstanceInfo, InstanceState, LaunchInvalid, Market, NoCapacity, PriceTooLow, QuotaExceeded

TOKEN_TAG = "spotrun:client-token"
JOB_TAG = "spotrun:job"
VM_NAME_PREFIX = "spotrun-"
MAX_VM_NAME_LENGTH = 64  # Linux VM and computer names
SPOT_PRIORITIES = frozenset({"spot", "low"})  # "Low" is the older name of Spot
_READABLE_TOKEN = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
_VM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}[A-Za-z0-9_]|[A-Za-z0-9]")

# The instance view's PowerState/<x>. spotrun never stops or deallocates a VM, so a VM on its way down is over.
_POWER_STATES: dict[str, InstanceState] = {
    "starting": "pending",
    "running": "running",
    "stopping": "terminated",
    "stopped": "terminated",
    "deallocating": "terminated",
    "deallocated": "terminated",
}
_REFUSAL_NAMES = {
    NoCapacity: "no_capacity", PriceTooLow: "price_too_low", QuotaExceeded: "quota_exceeded", LaunchInvalid: "launch_invalid",
}


def vm_name(client_token: str) -> str:
    """The VM name for a client token, always the same: the token itself when it makes a good name, else its hash.

    Azure names are case-insensitive, so only lower-case tokens are used as they are."""
    if _READABLE_TOKEN.fullmatch(client_token) and len(VM_NAME_PREFIX + client_token) <= MAX_VM_NAME_LENGTH:
        return VM_NAME_PREFIX + client_token
    return VM_NAME_PREFIX + hashlib.sha256(client_token.encode()).hexdigest()[:40]


def check_vm_name(instance_id: str) -> None:
    if not isinstance(instance_id, str) or not _VM_NAME.fullmatch(instance_id):
        raise ValueError(f"{instance_id!r} is not an Azure VM name (1-64 letters, digits, '-', '_', '.')")


def zone_name(location: str, zones: list[str] | None) -> str:
    """spotrun's name of a placement: "<location>-<zone>", or the bare location for a VM without a zone."""
    return f"{location}-{zones[0]}" if zones else location


def zones_field(location: str, zone: str) -> list[str]:
    """The VM's `zones` for spotrun's zone name: ["2"] for "eastus-2", [] for the regional "eastus"."""
    if zone == location:
        return []
    prefix = f"{location}-"
    if zone.startswith(prefix) and zone[len(prefix):].isdigit():
        return [zone[len(prefix):]]
    raise ValueError(f"zone {zone!r} is not in location {location!r}: expected {location}-<n> (e.g. {location}-1) or {location}")


def instance_info(vm: VirtualMachine, location: str) -> InstanceInfo:
    tags = dict(vm.tags or {})
    market = market_of(vm)
    provisioning = text(vm.provisioning_state)
    statuses = list(vm.instance_view.statuses or []) if vm.instance_view is not None else []
    power = _power_state(statuses)
    failure = _provisioning_failure(statuses)
    state = _state(provisioning, power, failure is not None)
    eviction_policy = text(vm.eviction_policy) or None
    detail: dict[str, Any] = {"provisioning_state": provisioning, "power_state": power, "priority": text(vm.priority) or "Regular"}
    if eviction_policy:
        detail["eviction_policy"] = eviction_policy
    if JOB_TAG in tags:
        detail["job"] = tags[JOB_TAG]
    if failure is not None:
        code, message = failure
        detail["provisioning_error"] = code
        detail["reason"] = f"{code}: {message}"
        refusal = launch_refusal_for(code, message)
        if refusal is not None:
            detail["refusal"] = _REFUSAL_NAMES[refusal]
    # Eviction with policy Deallocate leaves the VM deallocated; spotrun itself never deallocates one.
    reclaimed = market == "spot" and eviction_policy == "Deallocate" and power in ("deallocating", "deallocated")
    if reclaimed:
        detail["reason"] = "deallocated: a spot eviction (eviction policy Deallocate)"
    return InstanceInfo(
        instance_id=str(vm.name),
        zone=zone_name(vm.location or location, vm.zones),
        market=market,
        instance_type=text(vm.hardware_profile.vm_size) if vm.hardware_profile else "",
        state=state,
        reclaimed=reclaimed,
        launched_at=_timestamp(vm.time_created),
        terminated_at=_last_change(statuses) if state == "terminated" else None,
        client_token=tags.get(TOKEN_TAG),
        detail=detail,
    )


def market_of(vm: VirtualMachine) -> Market:
    return "spot" if text(vm.priority).lower() in SPOT_PRIORITIES else "on-demand"


def text(value: Any) -> str:
    """An SDK value as Azure wrote it: the SDK's enums print as "Class.MEMBER", their value is the wire text."""
    if value is None:
        return ""
    return str(value.value) if isinstance(value, Enum) else str(value)


def unknown_info(instance_id: str, why: str) -> InstanceInfo:
    """What describe answers when Azure could not be asked: never "terminated" on a failed probe."""
    return InstanceInfo(
        instance_id=instance_id, zone="", market="spot", instance_type="", state="unknown", detail={"error": why}
    )


def _state(provisioning: str, power: str | None, failed: bool) -> InstanceState:
    if provisioning.lower() == "deleting":
        return "terminated"
    if power is not None:
        return _POWER_STATES.get(power, "unknown")
    if failed:
        return "terminated"  # never allocated (e.g. ZonalAllocationFailed): nothing runs
    return "pending" if provisioning.lower() in ("creating", "updating", "succeeded", "") else "unknown"


def _power_state(statuses: list[InstanceViewStatus]) -> str | None:
    for status in statuses:
        code = str(status.code or "")
        if code.startswith("PowerState/"):
            return code.removeprefix("PowerState/")
    return None


def _provisioning_failure(statuses: list[InstanceViewStatus]) -> tuple[str, str] | None:
    """(code, message) of a "ProvisioningState/failed/<code>" status."""
    for status in statuses:
        code = str(status.code or "")
        if code.lower().startswith("provisioningstate/failed"):
            return code.split("/", 2)[2] if code.count("/") >= 2 else "ProvisioningFailed", str(status.message or "")
    return None


def _last_change(statuses: list[InstanceViewStatus]) -> float | None:
    """When the VM last changed state: Azure stamps only the ProvisioningState status with a time."""
    times = [status.time for status in statuses if isinstance(status.time, datetime)]
    return max(times).timestamp() if times else None


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None
