"""describe / terminate / list / preempt against the fake ARM, including evictions and failed probes."""

from __future__ import annotations

import pytest
from fakes_azure import FakeCredential, LoopbackTransport

from spotrun.providers.azure import AzureApiError, AzureProvider, AzureSettings


def test_a_launch_that_outlasts_launch_wait_answers_pending(make_provider, make_request, arm) -> None:
    provider = make_provider(launch_wait=0.05)
    with arm.hold_allocations():
        info = provider.launch(make_request())
        assert info.state == "pending"
        assert provider.describe(info.instance_id).state == "pending"
        assert info.detail["provisioning_state"] == "Creating"
    arm.settle_all()

    assert provider.describe(info.instance_id).state == "running"


def test_launch_wait_zero_does_not_poll_the_operation(make_provider, make_request, arm) -> None:
    info = make_provider(launch_wait=0).launch(make_request())

    assert info.state == "pending"
    assert arm.count("GET", "/operations/") == 0


def test_terminate_deletes_and_is_idempotent(provider, make_request, arm) -> None:
    info = provider.launch(make_request())

    provider.terminate(info.instance_id)
    deleting = provider.describe(info.instance_id)
    gone = provider.describe(info.instance_id)
    provider.terminate(info.instance_id)  # 204 for a VM Azure no longer has

    assert (deleting.state, deleting.detail["provisioning_state"]) == ("terminated", "Deleting")
    assert (gone.state, gone.reclaimed, gone.detail["reason"]) == ("terminated", False, "deleted by spotrun")
    assert gone.zone == "eastus-2" and gone.client_token == info.client_token
    assert arm.count("DELETE", info.instance_id) == 2


def test_a_404_on_delete_is_fine(provider, arm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arm, "_vm_delete", lambda request, **_: (404, {}, {"error": {"code": "ResourceNotFound", "message": "gone"}}))

    provider.terminate("spotrun-never-launched")


def test_a_failed_delete_raises_with_azures_code(provider, make_request, arm, monkeypatch: pytest.MonkeyPatch) -> None:
    info = provider.launch(make_request())
    monkeypatch.setattr(arm, "_vm_delete", lambda request, **_: (409, {}, {"error": {"code": "ScopeLocked", "message": "locked"}}))

    with pytest.raises(AzureApiError, match="ScopeLocked"):
        provider.terminate(info.instance_id)


def test_a_spot_vm_evicted_with_policy_delete_is_reclaimed(provider, make_request, arm) -> None:
    info = provider.launch(make_request())

    arm.evict(info.instance_id)
    evicted = provider.describe(info.instance_id)

    assert (evicted.state, evicted.reclaimed) == ("terminated", True)
    assert "evicted" in evicted.detail["reason"]
    assert evicted.market == "spot" and evicted.client_token == info.client_token


def test_a_vm_deleted_outside_spotrun_that_this_process_never_saw_is_not_called_reclaimed(make_provider, make_request, arm) -> None:
    info = make_provider().launch(make_request())
    arm.delete_outside(info.instance_id)

    after_restart = make_provider().describe(info.instance_id)

    assert (after_restart.state, after_restart.reclaimed) == ("terminated", False)


def test_an_on_demand_vm_that_vanished_is_not_reclaimed(provider, make_request, arm) -> None:
    info = provider.launch(make_request(market="on-demand"))
    arm.delete_outside(info.instance_id)

    assert provider.describe(info.instance_id).reclaimed is False


def test_a_spot_vm_evicted_with_policy_deallocate_is_reclaimed_from_its_instance_view(make_provider, make_request, arm) -> None:
    info = make_provider(eviction_policy="Deallocate").launch(make_request())
    arm.evict(info.instance_id)

    evicted = make_provider().describe(info.instance_id)  # a fresh process: the instance view alone tells

    assert (evicted.state, evicted.reclaimed) == ("terminated", True)
    assert evicted.detail["power_state"] == "deallocated"
    assert evicted.terminated_at is not None


def test_preempt_simulates_an_eviction(provider, make_request, arm) -> None:
    info = provider.launch(make_request())

    provider.preempt(info.instance_id, notice_seconds=30)

    assert arm.count("POST", f"/virtualMachines/{info.instance_id}/simulateEviction") == 1
    assert provider.describe(info.instance_id).reclaimed is True


def test_preempt_of_an_on_demand_vm_is_refused_by_azure(provider, make_request) -> None:
    info = provider.launch(make_request(market="on-demand"))

    with pytest.raises(AzureApiError, match="OperationNotAllowed"):
        provider.preempt(info.instance_id)


@pytest.mark.parametrize(
    ("status", "code"), [(500, "InternalServerError"), (403, "AuthorizationFailed"), (429, "TooManyRequests")]
)
def test_a_failed_describe_is_unknown_never_terminated(provider, make_request, arm, status, code) -> None:
    info = provider.launch(make_request())
    arm.fail_reads(status, code, times=10)

    probed = provider.describe(info.instance_id)

    assert probed.state == "unknown"
    assert code in probed.detail["error"]


def test_a_404_that_does_not_say_the_vm_is_gone_is_unknown_never_terminated(provider, make_request, arm) -> None:
    """ARM answers 404 SubscriptionNotFound to a credential that lost the subscription: every running VM read as gone,
    its attempt as lost, and the VM itself ran on, out of sight."""
    info = provider.launch(make_request())
    arm.fail_reads(404, "SubscriptionNotFound", f"The subscription '{arm.subscription_id}' could not be found.", times=10)

    probed = provider.describe(info.instance_id)

    assert probed.state == "unknown"
    assert "SubscriptionNotFound" in probed.detail["error"]


def test_a_404_on_delete_that_does_not_say_the_vm_is_gone_raises(provider, make_request, arm, monkeypatch: pytest.MonkeyPatch) -> None:
    info = provider.launch(make_request())
    monkeypatch.setattr(arm, "_vm_delete", lambda request, **_: (404, {}, {"error": {"code": "SubscriptionNotFound", "message": "x"}}))

    with pytest.raises(AzureApiError, match="SubscriptionNotFound"):
        provider.terminate(info.instance_id)


def test_an_unreachable_arm_is_unknown(provider, make_request, arm) -> None:
    info = provider.launch(make_request())
    arm.close()

    assert provider.describe(info.instance_id).state == "unknown"


def test_a_describe_that_fails_once_is_retried_by_the_sdk(provider, make_request, arm) -> None:
    info = provider.launch(make_request())
    arm.fail_reads(503, "ServiceUnavailable", times=1)

    assert provider.describe(info.instance_id).state == "running"


def test_list_instances_returns_spotrun_vms_of_the_group_across_pages(provider, make_request, arm) -> None:
    launched = {provider.launch(make_request(f"sr-1-{n}")).instance_id for n in range(3)}
    provider.compute.virtual_machines.begin_create_or_update(
        "spotrun-test", "someone-elses-vm", {"location": "eastus", "properties": {"hardwareProfile": {"vmSize": "Standard_D2s_v5"}}},
        polling=False,
    )

    listed = provider.list_instances()

    assert {info.instance_id for info in listed} == launched
    assert all(info.state == "running" and info.client_token for info in listed)
    assert arm.count("GET", "/virtualMachines") >= 2  # paged (two per page in the fake)


def test_list_failure_raises(provider, arm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arm, "_vms_get", lambda request, **_: (500, {}, {"error": {"code": "InternalServerError", "message": "x"}}))

    with pytest.raises(AzureApiError, match="InternalServerError"):
        provider.list_instances()


def test_bad_instance_ids_are_refused(provider, arm) -> None:
    for bad in ("", "a/b", "-x" * 40, None):
        with pytest.raises(ValueError, match="not an Azure VM name"):
            provider.describe(bad)  # type: ignore[arg-type]
    assert arm.requests == []


def test_the_sdk_talks_https_to_arm_with_the_credentials_token(arm, credential) -> None:
    provider = AzureProvider(
        AzureSettings(
            subscription_id=arm.subscription_id, resource_group="rg", location="eastus",
            subnet_id=f"/subscriptions/{arm.subscription_id}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s",
            ssh_public_key="ssh-rsa AAAAB3Nza key",
        ),
        credential=FakeCredential("another-token"),
        client_options={"transport": LoopbackTransport(arm.url), "retry_total": 0},
    )

    # The fake refuses a token it does not know: the provider's calls carry the credential's token.
    assert provider.describe("spotrun-x").state == "unknown"
    assert arm.requests[-1].headers["authorization"] == "Bearer another-token"
    assert provider.compute._config.credential_scopes == ["https://management.azure.com/.default"]
