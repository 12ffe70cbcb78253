"""Azure's refusals, at the PUT or in the long-running create operation, become the provider's refusals."""

from __future__ import annotations

import pytest

from spotrun.providers.azure import AzureApiError
from spotrun.providers.base import LaunchInvalid, NoCapacity, PriceTooLow, QuotaExceeded

QUOTA_MESSAGE = (
    "Operation could not be completed as it results in exceeding approved LowPriorityCores quota. Additional "
    "details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0, "
    "Additional Required: 6, (Minimum) New Limit Required: 6."
)
PRICE_MESSAGE = (
    "Unable to perform operation 'Create VM' since the provided max price '0.1 USD' is lower than the current "
    "spot price '0.4103 USD' for Azure Spot VM size 'Standard_NC6s_v3'."
)


@pytest.mark.parametrize(
    ("status", "code", "message", "refusal"),
    [
        (409, "SkuNotAvailable", "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: Standard_NC6s_v3' is currently not available in location 'eastus'.", NoCapacity),
        (400, "AzureSpotIsNotSupportedForThisVMSize", "Azure Spot Virtual Machine is not supported for this VM size Standard_NC6s_v3.", NoCapacity),
        (409, "OperationNotAllowed", QUOTA_MESSAGE, QuotaExceeded),
        (409, "QuotaExceeded", "Quota exceeded for Standard NCSv3 Family vCPUs.", QuotaExceeded),
        (400, "SpotPriceGreaterThanProvidedMaxPrice", PRICE_MESSAGE, PriceTooLow),
        (409, "OperationNotAllowed", PRICE_MESSAGE, PriceTooLow),
    ],
)
def test_refusals_at_the_put(provider, make_request, arm, status, code, message, refusal) -> None:
    arm.refuse_next_create(status, code, message)

    with pytest.raises(refusal, match=code):
        provider.launch(make_request(max_price=0.1))
    assert arm.vms == {}


@pytest.mark.parametrize(
    "code",
    ["ZonalAllocationFailed", "AllocationFailed", "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest"],
)
def test_allocation_failures_in_the_operation_are_no_capacity_and_the_failed_vm_is_deleted(provider, make_request, arm, code) -> None:
    arm.fail_next_allocation(code, "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone.")

    with pytest.raises(NoCapacity, match=code):
        provider.launch(make_request())
    assert arm.count("DELETE", "/virtualMachines/spotrun-sr-1-0a1b2c3d4e5f6a7b") == 1


def test_an_allocation_failure_after_launch_answered_pending_is_refused_on_the_next_launch(make_provider, make_request, arm) -> None:
    provider = make_provider(launch_wait=0.05)
    arm.fail_next_allocation("ZonalAllocationFailed", "Allocation failed in zone 2.")
    with arm.hold_allocations():
        pending = provider.launch(make_request())
    assert pending.state == "pending"
    arm.settle_all()

    failed = provider.describe(pending.instance_id)
    assert failed.state == "terminated"
    assert failed.detail["provisioning_error"] == "ZonalAllocationFailed"
    assert failed.detail["refusal"] == "no_capacity"
    with pytest.raises(NoCapacity, match="ZonalAllocationFailed"):
        provider.launch(make_request())
    assert arm.count("PUT", "/virtualMachines/") == 1
    assert arm.count("DELETE", f"/virtualMachines/{pending.instance_id}") == 1


def test_other_errors_carry_azures_code_and_message(provider, make_request, arm) -> None:
    arm.refuse_next_create(409, "AnotherOperationInProgress", "Another operation on this or dependent resource is in progress.")

    with pytest.raises(AzureApiError, match="AnotherOperationInProgress: Another operation on this") as raised:
        provider.launch(make_request())
    assert raised.value.code == "AnotherOperationInProgress"


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (400, "InvalidParameter", "The value of parameter imageReference.sku is invalid."),
        (404, "PlatformImageNotFound", "The platform image 'Canonical:ubuntu-24_04-lts:server:latest' is not available."),
        (404, "ImageNotFound", "The gallery image /subscriptions/.../images/trainer/versions/1.0.0 is not available."),
        (400, "InvalidResourceReference", "Resource /subscriptions/.../subnets/default referenced by resource "
                                          "spotrun-sr-1-0a1b2c3d4e5f6a7b-nic was not found."),
        (404, "ResourceGroupNotFound", "Resource group 'spotrun-test' could not be found."),
    ],
)
def test_a_create_no_retry_can_mend_is_launch_invalid(provider, make_request, arm, status, code, message) -> None:
    """Retried as a transient error, it was refused alike until the launch timeout, then placed again, forever."""
    arm.refuse_next_create(status, code, message)

    with pytest.raises(LaunchInvalid, match=code):
        provider.launch(make_request())
    assert arm.vms == {}


def test_a_template_deployment_error_is_launch_invalid_by_the_bad_parameter_it_wraps(provider, make_request, arm) -> None:
    inner = {"code": "InvalidParameter", "target": "imageReference",
             "message": "The following list of images referenced from the deployment template are not found."}
    arm.refuse_next_create(400, "InvalidTemplateDeployment", "The template deployment is not valid. See inner errors.", [inner])

    with pytest.raises(LaunchInvalid, match="InvalidParameter: The following list of images"):
        provider.launch(make_request())


def test_a_template_deployment_error_wrapping_a_quota_stays_a_quota_refusal(provider, make_request, arm) -> None:
    details = [{"code": "InvalidParameter", "message": "The value of parameter osProfile is invalid."},
               {"code": "OperationNotAllowed", "message": QUOTA_MESSAGE}]
    arm.refuse_next_create(400, "InvalidTemplateDeployment", "The template deployment is not valid.", details)

    with pytest.raises(QuotaExceeded, match="OperationNotAllowed"):
        provider.launch(make_request())


def test_a_create_operation_failing_for_a_missing_image_is_launch_invalid_and_the_vm_is_deleted(provider, make_request, arm) -> None:
    arm.fail_next_allocation("ImageNotFound", "The image referenced by the VM was deleted.")

    with pytest.raises(LaunchInvalid, match="ImageNotFound"):
        provider.launch(make_request())
    assert arm.count("DELETE", "/virtualMachines/spotrun-sr-1-0a1b2c3d4e5f6a7b") == 1


@pytest.mark.parametrize(("code", "message", "refusal", "refused_as"), [
    ("InvalidParameter", "The value of parameter osDisk.diskSizeGB is invalid.", "launch_invalid", LaunchInvalid),
    ("ZonalAllocationFailed", "Allocation failed. We do not have sufficient capacity.", "no_capacity", NoCapacity),
])
def test_a_failed_create_is_its_refusal_on_a_repeated_launch_and_not_found_by_its_token(
    make_provider, make_request, arm, code, message, refusal, refused_as,
) -> None:
    """The controller looks a launch up by its token when the launch's answer was lost: a VM refused for capacity
    was taken as the attempt's instance, which then ended lost (a preemption's count) rather than refused."""
    provider = make_provider(launch_wait=0.05)
    arm.fail_next_allocation(code, message)
    with arm.hold_allocations():
        pending = provider.launch(make_request())
    arm.settle_all()

    assert provider.describe(pending.instance_id).detail["refusal"] == refusal
    assert provider.find_by_token(pending.client_token) is None
    with pytest.raises(refused_as, match=code):
        provider.launch(make_request())  # the launch tried again with its token: the refusal it stands for


def test_an_invalid_parameter_outside_a_create_is_an_api_error(provider, make_request, arm) -> None:
    launched = provider.launch(make_request())
    arm.fail_reads(400, "InvalidParameter", "The value of parameter $expand is invalid.")

    with pytest.raises(AzureApiError, match="InvalidParameter"):
        provider.find_by_token(launched.client_token)


def test_an_operation_that_fails_for_another_reason_is_an_api_error_and_keeps_the_vm(provider, make_request, arm) -> None:
    arm.fail_next_allocation("OSProvisioningTimedOut", "OS Provisioning for VM did not finish in the allotted time.")

    with pytest.raises(AzureApiError, match="OSProvisioningTimedOut"):
        provider.launch(make_request())
    # The controller retries with the same token and gets the (failed) VM; it terminates it when the attempt ends.
    again = provider.launch(make_request())
    assert again.state == "terminated"
    assert again.detail["provisioning_error"] == "OSProvisioningTimedOut"
    assert "refusal" not in again.detail


def test_a_refused_read_before_launch_is_an_api_error_not_a_second_vm(provider, make_request, arm) -> None:
    arm.fail_reads(403, "AuthorizationFailed", "The client does not have authorization to perform action read.")

    with pytest.raises(AzureApiError, match="AuthorizationFailed"):
        provider.launch(make_request())
    assert arm.created_bodies() == []

