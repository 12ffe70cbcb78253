"""Reading a VM (model + instance view, as ARM returns it) as the provider interface's InstanceInfo."""

from __future__ import annotations

from typing import Any

import pytest
from azure.mgmt.compute.models import VirtualMachine

from spotrun.providers.azure.instances import instance_info


def vm(
    *, provisioning: str = "Succeeded", power: str | None = "running", priority: str = "Spot",
    eviction: str | None = "Delete", failure: tuple[str, str] | None = None, zones: list[str] | None = None,
) -> VirtualMachine:
    statuses: list[dict[str, Any]] = []
    if failure is not None:
        statuses.append({"code": f"ProvisioningState/failed/{failure[0]}", "message": failure[1], "time": "2025-05-01T10:00:00Z"})
    else:
        statuses.append({"code": f"ProvisioningState/{provisioning.lower()}", "time": "2025-05-01T10:00:00Z"})
    if power is not None:
        statuses.append({"code": f"PowerState/{power}"})
    properties: dict[str, Any] = {
        "provisioningState": provisioning,
        "priority": priority,
        "hardwareProfile": {"vmSize": "Standard_NC4as_T4_v3"},
        "timeCreated": "2025-05-01T09:58:00Z",
        "instanceView": {"statuses": statuses},
    }
    if eviction is not None:
        properties["evictionPolicy"] = eviction
    return VirtualMachine({
        "name": "spotrun-sr-1-a", "location": "eastus", "zones": zones if zones is not None else ["1"],
        "tags": {"spotrun:client-token": "sr-1-a", "spotrun:job": "4"}, "properties": properties,
    })


@pytest.mark.parametrize(
    ("provisioning", "power", "state"),
    [
        ("Creating", None, "pending"),
        ("Creating", "starting", "pending"),
        ("Succeeded", "running", "running"),
        ("Updating", "running", "running"),
        ("Succeeded", "stopping", "terminated"),
        ("Succeeded", "stopped", "terminated"),
        ("Succeeded", "deallocated", "terminated"),
        ("Deleting", "running", "terminated"),
        ("Succeeded", "unknown", "unknown"),
        ("Migrating", None, "unknown"),
    ],
)
def test_states(provisioning, power, state) -> None:
    info = instance_info(vm(provisioning=provisioning, power=power), "eastus")

    assert info.state == state
    assert (info.detail["provisioning_state"], info.detail["power_state"]) == (provisioning, power)


def test_what_a_running_spot_vm_says() -> None:
    info = instance_info(vm(zones=["3"]), "eastus")

    assert (info.instance_id, info.zone, info.market, info.instance_type) == ("spotrun-sr-1-a", "eastus-3", "spot", "Standard_NC4as_T4_v3")
    assert (info.client_token, info.detail["job"], info.reclaimed) == ("sr-1-a", "4", False)
    assert info.launched_at == pytest.approx(1746093480.0, abs=0.001)
    assert info.terminated_at is None


def test_a_regular_vm_is_on_demand_and_a_vm_without_zones_is_regional() -> None:
    info = instance_info(vm(priority="Regular", eviction=None, zones=[]), "eastus")

    assert (info.market, info.zone) == ("on-demand", "eastus")


def test_a_deallocated_spot_vm_with_policy_deallocate_was_reclaimed() -> None:
    info = instance_info(vm(power="deallocated", eviction="Deallocate"), "eastus")

    assert (info.state, info.reclaimed) == ("terminated", True)
    assert info.terminated_at == pytest.approx(1746093600.0, abs=0.001)


@pytest.mark.parametrize(
    ("power", "priority", "eviction"),
    [("deallocated", "Regular", None), ("stopped", "Spot", "Deallocate"), ("deallocated", "Spot", "Delete")],
)
def test_other_stopped_vms_were_not_reclaimed(power, priority, eviction) -> None:
    info = instance_info(vm(power=power, priority=priority, eviction=eviction), "eastus")

    assert (info.state, info.reclaimed) == ("terminated", False)


def test_a_failed_allocation_is_terminated_and_names_its_refusal() -> None:
    info = instance_info(vm(power=None, failure=("OverconstrainedZonalAllocationRequest", "Allocation failed.")), "eastus")

    assert info.state == "terminated"
    assert info.detail["provisioning_error"] == "OverconstrainedZonalAllocationRequest"
    assert info.detail["refusal"] == "no_capacity"
    assert "Allocation failed." in info.detail["reason"]


def test_a_failed_provisioning_of_a_running_vm_is_running() -> None:
    info = instance_info(vm(power="running", failure=("VMExtensionProvisioningError", "an extension failed")), "eastus")

    assert info.state == "running"
    assert "refusal" not in info.detail
