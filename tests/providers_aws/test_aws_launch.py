"""Launching on EC2 (moto): market options, placement, tags, idempotency by client token, user data."""

from __future__ import annotations

import base64
import logging

import pytest

from spotrun.providers.aws import AwsProvider
from spotrun.providers.base import Provider

FAKE_ACCESS_KEY = "AKIASPOTRUNLEAKTEST7"
FAKE_SECRET_KEY = "spotrun/leak+test/secret/4f1c9a"
AGENT_TOKEN = "agent-token-3b8e0d1f"


def raw_instance(ec2, instance_id: str) -> dict:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def user_data_of(ec2, instance_id: str) -> str:
    value = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    return base64.b64decode(value).decode()


def test_provider_satisfies_the_protocol(aws: AwsProvider) -> None:
    assert isinstance(aws, Provider)
    assert aws.name == "aws"
    assert aws.region == "us-east-1"


def test_spot_launch_is_a_tagged_spot_instance_in_the_zone(aws, make_request, ec2_client) -> None:
    info = aws.launch(make_request("sr-42-aaaa", zone="us-east-1b"))

    assert (info.zone, info.market, info.instance_type, info.client_token) == ("us-east-1b", "spot", "p3.2xlarge", "sr-42-aaaa")
    assert info.state in ("pending", "running")
    raw = raw_instance(ec2_client(aws), info.instance_id)
    assert raw["InstanceLifecycle"] == "spot"
    assert raw["Placement"]["AvailabilityZone"] == "us-east-1b"
    tags = {tag["Key"]: tag["Value"] for tag in raw["Tags"]}
    assert tags["spotrun:client-token"] == "sr-42-aaaa"
    assert tags["spotrun:job"] == "42"
    assert raw["ImageId"] == aws.ssm.get_parameter(Name=aws.settings.image)["Parameter"]["Value"]


def test_on_demand_launch_has_no_spot_lifecycle(aws, make_request, ec2_client) -> None:
    info = aws.launch(make_request("sr-42-od", market="on-demand"))

    assert info.market == "on-demand"
    assert "InstanceLifecycle" not in raw_instance(ec2_client(aws), info.instance_id)


def test_run_instances_gets_spot_options_price_and_client_token(aws, make_request) -> None:
    sent = []
    aws.ec2.meta.events.register("provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(dict(params)))

    aws.launch(make_request("sr-42-params", max_price=0.918))

    (params,) = sent
    assert params["ClientToken"] == "sr-42-params"
    assert params["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate", "MaxPrice": "0.918"},
    }
    assert params["Placement"] == {"AvailabilityZone": "us-east-1a"}
    assert params["InstanceInitiatedShutdownBehavior"] == "terminate"


def test_same_token_returns_the_same_instance(aws, make_request, ec2_client) -> None:
    first = aws.launch(make_request("sr-42-same"))
    again = aws.launch(make_request("sr-42-same"))

    assert again.instance_id == first.instance_id
    assert aws.find_by_token("sr-42-same").instance_id == first.instance_id
    listed = [info for info in aws.list_instances() if info.client_token == "sr-42-same"]
    assert [info.instance_id for info in listed] == [first.instance_id]


def test_a_token_is_matched_exactly_though_ec2_filters_take_wildcards(aws, make_request) -> None:
    first = aws.launch(make_request("sr-42-aaaa"))

    assert aws.find_by_token("sr-42-*") is None and aws.find_by_token("sr-42-a???") is None
    assert aws.launch(make_request("sr-42-a???")).instance_id != first.instance_id


def test_same_token_for_a_different_placement_is_refused(aws, make_request) -> None:
    aws.launch(make_request("sr-42-clash", zone="us-east-1a"))

    with pytest.raises(ValueError, match="sr-42-clash"):
        aws.launch(make_request("sr-42-clash", zone="us-east-1b"))


def test_user_data_installs_spotrun_and_execs_the_agent_without_aws_credentials(aws, make_request, ec2_client, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="spotrun")
    info = aws.launch(make_request("sr-42-userdata"))

    script = user_data_of(ec2_client(aws), info.instance_id)
    assert script.startswith("#!/bin/bash\n")
    assert "python3 -m pip install --quiet 'spotrun==" in script
    assert "\nexec python3 -m spotrun.agent >>/var/log/spotrun-agent.log 2>&1\n" in script
    assert "export SPOTRUN_AGENT_CONFIG=" in script and AGENT_TOKEN in script
    assert "/home/me/.venv" not in script  # the controller's interpreter and PATH stay behind
    for secret in (FAKE_ACCESS_KEY, FAKE_SECRET_KEY, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert secret not in script
    for secret in (FAKE_ACCESS_KEY, FAKE_SECRET_KEY, AGENT_TOKEN):
        assert secret not in caplog.text
    assert info.instance_id in caplog.text  # the launch was logged, without its secrets


def test_custom_install_command_and_interpreter(make_request, ec2_client, server_provider) -> None:
    aws = server_provider(
        python="/opt/pytorch/bin/python",
        install_command="/opt/pytorch/bin/pip install spotrun-fork==9",
    )
    info = aws.launch(make_request("sr-42-custom"))

    script = user_data_of(ec2_client(aws), info.instance_id)
    assert "\n/opt/pytorch/bin/pip install spotrun-fork==9\n" in script
    assert "export PATH=/opt/pytorch/bin:\"$PATH\"" in script
    assert "\nexec /opt/pytorch/bin/python -m spotrun.agent " in script


def test_network_and_identity_options_reach_run_instances(make_request, server_provider, ec2_client) -> None:
    ec2 = ec2_client(server_provider())
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone="us-east-1c")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="spotrun", Description="spotrun", VpcId=vpc)["GroupId"]
    ec2.create_key_pair(KeyName="spotrun-key")
    aws = server_provider(
        subnets={"us-east-1c": subnet},
        security_group_ids=(group,),
        key_name="spotrun-key",
    )

    info = aws.launch(make_request("sr-42-net", zone="us-east-1c"))

    raw = raw_instance(ec2, info.instance_id)
    assert raw["SubnetId"] == subnet
    assert [g["GroupId"] for g in raw["SecurityGroups"]] == [group]
    assert raw["KeyName"] == "spotrun-key"


def test_bad_requests_name_the_field(aws, make_request) -> None:
    with pytest.raises(ValueError, match="client_token"):
        aws.launch(make_request("x" * 65))
    with pytest.raises(ValueError, match="market"):
        aws.launch(make_request("sr-1", market="reserved"))
    with pytest.raises(ValueError, match="argv"):
        aws.launch(make_request("sr-2", user_data={"env": {}}))
    with pytest.raises(ValueError, match="max_price"):
        aws.launch(make_request("sr-3", max_price=0))
    assert aws.list_instances() == []


def test_missing_image_parameter_is_a_clear_error(make_request, server_provider) -> None:
    aws = server_provider(image="/spotrun/no/such/parameter")

    with pytest.raises(ValueError, match="/spotrun/no/such/parameter"):
        aws.launch(make_request("sr-42-noimage"))
