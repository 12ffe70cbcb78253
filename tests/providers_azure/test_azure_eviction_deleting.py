"""a spot VM Azure is deleting because it evicted it (policy Delete) reads as reclaimed, as once it is gone."""

from __future__ import annotations


def _start_eviction_delete(arm, name: str, reads: int = 3) -> None:
    """Azure evicting a spot VM with policy Delete: the VM shows provisioningState Deleting for a while, then is gone."""
    with arm._lock:
        vm = arm.vms[name.lower()]
        vm.resource["properties"]["provisioningState"] = "Deleting"
        vm.deleting_reads_left = reads


def test_spot_vm_being_deleted_by_its_eviction_is_reclaimed(provider, make_request, arm) -> None:
    info = provider.launch(make_request())
    provider.describe(info.instance_id)  # the controller's watch saw it running

    _start_eviction_delete(arm, info.instance_id)
    during = provider.describe(info.instance_id)

    assert during.state == "terminated"
    assert during.reclaimed is True


def test_controller_finish_sequence_during_eviction_delete_keeps_the_reclaim(provider, make_request, arm) -> None:
    """finish_attempt: terminate, then describe; the bill and the market's memory read `reclaimed` from that."""
    info = provider.launch(make_request())
    provider.describe(info.instance_id)

    _start_eviction_delete(arm, info.instance_id)
    provider.terminate(info.instance_id)
    after = provider.describe(info.instance_id)

    assert after.reclaimed is True


def test_a_vm_being_deleted_is_not_found_by_its_launchs_token(provider, make_request, arm) -> None:
    """The lookup of a launch whose answers were lost: a VM Azure is deleting (evicted, or its allocation failed and
    it was discarded) is no longer the launch's instance, as a relaunch does not take it."""
    info = provider.launch(make_request())
    assert provider.find_by_token(info.client_token).instance_id == info.instance_id

    _start_eviction_delete(arm, info.instance_id)

    assert provider.find_by_token(info.client_token) is None
