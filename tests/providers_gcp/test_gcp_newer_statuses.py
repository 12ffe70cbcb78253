"""GCE statuses of the current API (compute_v1.Instance.Status) that the provider does not map."""

from __future__ import annotations

import pytest

ZONE = "us-central1-a"


def _name(info) -> str:
    return info.instance_id.split("/", 1)[1]


@pytest.mark.parametrize("status", ["DEPROVISIONING", "STOPPED"])
def test_a_preempted_vm_halted_in_a_newer_status_is_terminated_and_reclaimed(make_provider, launch_request, cloud, status):
    provider = make_provider(preemptible=True)  # STOP semantics: the VM stays after its preemption
    launched = provider.launch(launch_request())
    cloud.preempt(ZONE, _name(launched))
    with cloud.lock:
        cloud.instances[(ZONE, _name(launched))]["status"] = status  # tear-down in progress / halted

    info = provider.describe(launched.instance_id)

    assert (info.state, info.reclaimed) == ("terminated", True)


def test_a_flex_start_vm_waiting_for_capacity_is_pending(provider, launch_request, cloud):
    launched = provider.launch(launch_request(market="on-demand"))
    with cloud.lock:
        cloud.instances[(ZONE, _name(launched))]["status"] = "PENDING"

    info = provider.describe(launched.instance_id)

    assert info.state == "pending"


def test_a_preempted_vm_still_shutting_down_is_running_until_its_shutdown_ends(provider, launch_request, cloud):
    """GCE leaves a preempted VM STOPPING for up to 30 s while its guest shuts down: read as terminated, the
    controller deleted it in the middle of the agent's final backup."""
    launched = provider.launch(launch_request())
    cloud.preempt(ZONE, _name(launched), shutting_down=True)
    info = provider.describe(launched.instance_id)
    assert (info.state, info.reclaimed, info.detail["gce_status"]) == ("running", True, "STOPPING")
    cloud.end_shutdown(ZONE, _name(launched))
    assert (provider.describe(launched.instance_id).state, provider.describe(launched.instance_id).reclaimed) == (
        "terminated", True)
