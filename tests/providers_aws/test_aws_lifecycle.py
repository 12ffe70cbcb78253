"""Describe, find, list and terminate on EC2 (moto), including a reclaimed spot instance and failed probes."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from botocore.exceptions import EndpointConnectionError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import StateReason

from spotrun.providers.aws import PreemptUnsupported


def test_describe_running_instance(aws, make_request) -> None:
    launched = aws.launch(make_request("sr-42-desc"))

    info = aws.describe(launched.instance_id)

    assert info.state == "running"  # moto starts instances at once
    assert not info.reclaimed
    assert (info.zone, info.market, info.client_token) == ("us-east-1a", "spot", "sr-42-desc")
    assert info.address is not None
    assert info.launched_at is not None and abs(info.launched_at - datetime.now(timezone.utc).timestamp()) < 120
    assert info.detail["ec2_state"] == "running"


def test_terminate_is_idempotent_and_not_a_reclaim(aws, make_request) -> None:
    launched = aws.launch(make_request("sr-42-term"))

    aws.terminate(launched.instance_id)
    aws.terminate(launched.instance_id)

    info = aws.describe(launched.instance_id)
    assert info.state == "terminated"
    assert not info.reclaimed
    assert info.terminated_at is not None
    assert info.detail["state_reason_code"] == "Client.UserInitiatedShutdown"


def test_terminate_of_an_unknown_instance_is_fine_and_of_a_malformed_id_is_an_error(aws) -> None:
    aws.terminate("i-0123456789abcdef0")
    with pytest.raises(ValueError, match="not-an-id"):
        aws.terminate("not-an-id")


def test_reclaimed_spot_instance(aws_in_process, make_request) -> None:
    # moto's API cannot interrupt a spot instance, so the reclaim is written into its in-process backend.
    launched = aws_in_process.launch(make_request("sr-42-reclaim"))
    instance = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(launched.instance_id)
    instance._state.name, instance._state.code = "terminated", 48
    instance._reason = "Service initiated (2024-05-01 10:20:30 GMT)"
    instance.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination", "Server.SpotInstanceTermination"
    )

    info = aws_in_process.describe(launched.instance_id)

    assert info.state == "terminated"
    assert info.reclaimed
    assert info.terminated_at == datetime(2024, 5, 1, 10, 20, 30, tzinfo=timezone.utc).timestamp()
    assert "Spot instance termination" in info.detail["reason"]


def test_on_demand_instance_is_never_reclaimed(aws_in_process, make_request) -> None:
    launched = aws_in_process.launch(make_request("sr-42-od-reclaim", market="on-demand"))
    instance = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(launched.instance_id)
    instance._state.name = "terminated"
    instance.state_reason = StateReason("Server.SpotInstanceTermination", "Server.SpotInstanceTermination")

    assert not aws_in_process.describe(launched.instance_id).reclaimed


@pytest.mark.parametrize(("ec2_state", "state"), [("shutting-down", "terminated"), ("stopped", "terminated"), ("pending", "pending")])
def test_ec2_states_map_to_provider_states(aws_in_process, make_request, ec2_state, state) -> None:
    launched = aws_in_process.launch(make_request(f"sr-42-{ec2_state}"))
    ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(launched.instance_id)._state.name = ec2_state

    info = aws_in_process.describe(launched.instance_id)

    assert info.state == state
    assert info.detail["ec2_state"] == ec2_state


def test_failed_probe_is_unknown_never_terminated(aws, make_request, inject) -> None:
    launched = aws.launch(make_request("sr-42-probe"))
    inject(aws, "DescribeInstances", error=("InternalError", "An internal error has occurred"))

    info = aws.describe(launched.instance_id)

    assert info.state == "unknown"
    assert "InternalError" in info.detail["error"]


def test_unreachable_endpoint_is_unknown(aws, make_request) -> None:
    launched = aws.launch(make_request("sr-42-offline"))

    def unreachable(**_: object) -> None:
        raise EndpointConnectionError(endpoint_url=aws.ec2.meta.endpoint_url)

    aws.ec2.meta.events.register("before-call.ec2.DescribeInstances", unreachable)

    info = aws.describe(launched.instance_id)
    assert info.state == "unknown"
    assert "EndpointConnectionError" in info.detail["error"]


def test_instance_ec2_does_not_list_is_unknown(aws) -> None:
    assert aws.describe("i-0123456789abcdef0").state == "unknown"


def test_find_by_token_and_list_see_only_spotrun_instances(aws, make_request, ec2_client) -> None:
    ec2 = ec2_client(aws)
    image = aws.ssm.get_parameter(Name=aws.settings.image)["Parameter"]["Value"]
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.micro")  # not spotrun's
    one = aws.launch(make_request("sr-1-one"))
    two = aws.launch(make_request("sr-2-two", market="on-demand"))
    aws.terminate(two.instance_id)

    assert aws.find_by_token("sr-1-one").instance_id == one.instance_id
    assert aws.find_by_token("sr-9-none") is None
    listed = {info.instance_id: info for info in aws.list_instances()}
    assert set(listed) == {one.instance_id, two.instance_id}
    assert listed[two.instance_id].state == "terminated"
    assert listed[one.instance_id].client_token == "sr-1-one"


def test_preempt_explains_that_ec2_cannot(aws, make_request) -> None:
    launched = aws.launch(make_request("sr-42-chaos"))

    with pytest.raises(PreemptUnsupported, match="Fault Injection"):
        aws.preempt(launched.instance_id, 5)
    assert aws.describe(launched.instance_id).state == "running"
