"""GCE's refusals, in the HTTP reply or in the insert operation's error, as the provider errors the controller reads."""

from __future__ import annotations

import pytest
from fakes_gcp import OperationError

from spotrun.providers.base import NoCapacity, QuotaExceeded
from spotrun.providers.gcp import GcpApiError

STOCKOUT_MESSAGE = "The zone 'projects/spotrun-test/zones/us-central1-a' does not have enough resources available to fulfill the request."


@pytest.mark.parametrize("reason", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"])
def test_stockout_in_the_http_reply_is_no_capacity_and_not_retried(provider, launch_request, cloud, reason):
    cloud.fail_next("POST", "/instances", 503, reason, STOCKOUT_MESSAGE)

    with pytest.raises(NoCapacity, match=reason):
        provider.launch(launch_request())
    assert len(cloud.requests_to("POST", "/instances")) == 1
    assert cloud.instances == {}


def test_stockout_as_an_error_info_reason_is_no_capacity(provider, launch_request, cloud):
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "resource_availability",
                "domain": "compute.googleapis.com"}]
    cloud.fail_next("POST", "/instances", 503, "backendError", STOCKOUT_MESSAGE, details=details)

    with pytest.raises(NoCapacity, match="resource_availability"):
        provider.launch(launch_request())


@pytest.mark.parametrize(
    ("code", "error_info_reason"),
    [("ZONE_RESOURCE_POOL_EXHAUSTED", None), ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "resource_availability"),
     ("UNEXPECTED_NEW_CODE", "resource_availability")],
)
def test_stockout_in_the_operation_error_is_no_capacity(provider, launch_request, cloud, code, error_info_reason):
    cloud.fail_next_insert_operation(OperationError(code, STOCKOUT_MESSAGE, error_info_reason=error_info_reason))

    with pytest.raises(NoCapacity, match="does not have enough resources"):
        provider.launch(launch_request())
    assert cloud.instances == {}


def test_quota_in_the_operation_error_is_quota_exceeded(provider, launch_request, cloud):
    message = "Quota 'PREEMPTIBLE_NVIDIA_V100_GPUS' exceeded.  Limit: 0.0 in region us-central1."
    cloud.fail_next_insert_operation(OperationError("QUOTA_EXCEEDED", message, http_status=403, http_message="FORBIDDEN"))

    with pytest.raises(QuotaExceeded, match="PREEMPTIBLE_NVIDIA_V100_GPUS"):
        provider.launch(launch_request())


def test_quota_in_the_http_reply_is_quota_exceeded(provider, launch_request, cloud):
    cloud.fail_next("POST", "/instances", 403, "quotaExceeded", "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.")

    with pytest.raises(QuotaExceeded, match="CPUS"):
        provider.launch(launch_request())


def test_other_operation_errors_carry_the_api_message(provider, launch_request, cloud):
    cloud.fail_next_insert_operation(
        OperationError("RESOURCE_NOT_FOUND", "The resource 'projects/x/global/images/nope' was not found", 404, "NOT FOUND")
    )

    with pytest.raises(GcpApiError, match="RESOURCE_NOT_FOUND: The resource 'projects/x/global/images/nope' was not found") as caught:
        provider.launch(launch_request())
    assert not isinstance(caught.value, (NoCapacity, QuotaExceeded))


def test_a_bad_machine_type_is_an_api_error_naming_it(provider, launch_request):
    with pytest.raises(GcpApiError, match="Machine type with name 'n9-huge' does not exist"):
        provider.launch(launch_request(instance_type="n9-huge"))


def test_a_transient_failure_of_the_insert_is_retried_with_the_same_request_id(provider, launch_request, cloud):
    cloud.fail_next("POST", "/instances", 503, "backendError", "try again")

    info = provider.launch(launch_request())

    inserts = cloud.requests_to("POST", "/instances")
    assert len(inserts) == 2 and inserts[0].query["requestId"] == inserts[1].query["requestId"]
    assert info.state == "running" and len(cloud.instances) == 1
