"""EC2 accepted a launch, then ended the instance for want of capacity (StateReason
Server.InsufficientInstanceCapacity) or of volume quota (Client.VolumeLimitExceeded): a refusal, not a loss."""

from __future__ import annotations

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import StateReason


@pytest.mark.parametrize("code, message, refusal", [
    ("Server.InsufficientInstanceCapacity",
     "Server.InsufficientInstanceCapacity: Insufficient capacity to satisfy launch request", "no_capacity"),
    ("Client.VolumeLimitExceeded",
     "Client.VolumeLimitExceeded: Volume limit exceeded", "quota_exceeded"),
])
def test_an_instance_ec2_ended_before_placing_it_is_a_refusal(aws_in_process, make_request, code, message, refusal):
    launched = aws_in_process.launch(make_request("sr-42-late-refusal"))
    instance = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(launched.instance_id)
    instance._state.name, instance._state.code = "terminated", 48
    instance._reason = ""
    instance.state_reason = StateReason(message, code)

    info = aws_in_process.describe(launched.instance_id)

    assert info.state == "terminated" and not info.reclaimed
    assert info.detail.get("refusal") == refusal
