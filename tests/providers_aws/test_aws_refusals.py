"""EC2's launch errors, injected through botocore's before-call hook, become the controller's provider errors."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from spotrun.providers.aws import AwsApiError
from spotrun.providers.aws.errors import translate
from spotrun.providers.base import NoCapacity, PriceTooLow, QuotaExceeded


@pytest.mark.parametrize(
    ("code", "refusal"),
    [
        ("InsufficientInstanceCapacity", NoCapacity),
        ("InsufficientCapacity", NoCapacity),
        ("UnfulfillableCapacity", NoCapacity),
        ("capacity-not-available", NoCapacity),
        ("SpotMaxPriceTooLow", PriceTooLow),
        ("MaxSpotInstanceCountExceeded", QuotaExceeded),
        ("InstanceLimitExceeded", QuotaExceeded),
        ("VcpuLimitExceeded", QuotaExceeded),
    ],
)
def test_refusal_codes_map_to_provider_errors(code, refusal) -> None:
    error = ClientError({"Error": {"Code": code, "Message": f"EC2 says {code}"}}, "RunInstances")

    translated = translate(error, "ec2:RunInstances")

    assert type(translated) is refusal
    assert f"EC2 says {code}" in str(translated)


@pytest.mark.parametrize(
    ("code", "refusal"),
    [("InsufficientInstanceCapacity", NoCapacity), ("SpotMaxPriceTooLow", PriceTooLow), ("VcpuLimitExceeded", QuotaExceeded)],
)
def test_refusals_from_ec2_reach_the_caller(aws, make_request, inject, code, refusal) -> None:
    handler = inject(aws, "RunInstances", error=(code, f"EC2 says {code}"))

    with pytest.raises(refusal, match=f"EC2 says {code}"):
        aws.launch(make_request("sr-42-refused"))

    assert len(handler.calls) == 1
    assert aws.list_instances() == []


def test_other_errors_keep_the_aws_code_and_message(aws_in_process, make_request, inject) -> None:
    inject(aws_in_process, "RunInstances", error=("UnauthorizedOperation", "You are not authorized to perform this operation."))

    with pytest.raises(AwsApiError) as raised:
        aws_in_process.launch(make_request("sr-42-denied"))

    assert raised.value.code == "UnauthorizedOperation"
    assert "RunInstances" in str(raised.value) and "not authorized" in str(raised.value)


def test_a_launch_retried_after_a_refusal_launches_once(aws_in_process, make_request, inject) -> None:
    handler = inject(aws_in_process, "RunInstances", error=("InsufficientInstanceCapacity", "try later"))
    with pytest.raises(NoCapacity):
        aws_in_process.launch(make_request("sr-42-retry"))
    aws_in_process.ec2.meta.events.unregister("before-call.ec2.RunInstances", handler)

    first = aws_in_process.launch(make_request("sr-42-retry"))
    second = aws_in_process.launch(make_request("sr-42-retry"))

    assert first.instance_id == second.instance_id
    assert len(aws_in_process.list_instances()) == 1
