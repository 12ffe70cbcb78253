"""Where an instance type is offered, and what spot costs there (moto, plus canned price histories)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

# moto's offering data lists g4dn.xlarge in these us-east-1 zones (not in us-east-1e) and has no p3 at all.
G4DN_ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"]


def test_zones_offering_the_type(aws) -> None:
    assert aws.zones("g4dn.xlarge") == G4DN_ZONES
    assert aws.zones("no-such.type") == []


def test_zones_are_listed_once_for_many_placements(aws) -> None:
    calls: list[str] = []
    for operation in ("DescribeInstanceTypeOfferings", "DescribeAvailabilityZones"):
        aws.ec2.meta.events.register(f"before-call.ec2.{operation}", lambda model, **_: calls.append(model.name))
    assert [aws.zones("g4dn.xlarge") for _ in range(3)] == [G4DN_ZONES] * 3
    assert sorted(calls) == ["DescribeAvailabilityZones", "DescribeInstanceTypeOfferings"]


def test_zones_leave_out_unavailable_zones(aws_in_process) -> None:
    zone = next(z for z in ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].describe_availability_zones() if z.name == "us-east-1c")
    zone.state = "impaired"
    try:
        assert aws_in_process.zones("g4dn.xlarge") == [z for z in G4DN_ZONES if z != "us-east-1c"]
    finally:
        zone.state = "available"


def test_spot_prices_from_moto(aws) -> None:
    # moto answers one fixed price for every zone that offers the type.
    assert aws.spot_prices("g4dn.xlarge") == {zone: 0.00001 for zone in G4DN_ZONES}


def test_spot_prices_take_the_latest_entry_per_zone(aws, inject) -> None:
    now = datetime.now(timezone.utc)

    def entry(zone: str, price: str, minutes_ago: int) -> dict:
        return {
            "AvailabilityZone": zone, "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
            "SpotPrice": price, "Timestamp": now - timedelta(minutes=minutes_ago),
        }

    history = [entry("us-east-1a", "0.9180", 30), entry("us-east-1a", "1.0410", 2), entry("us-east-1b", "0.7650", 10)]
    handler = inject(aws, "DescribeSpotPriceHistory", body={"SpotPriceHistory": history})

    assert aws.spot_prices("p3.2xlarge") == {"us-east-1a": 1.041, "us-east-1b": 0.765}
    (params,) = handler.calls
    assert params["body"]["InstanceType.1"] == "p3.2xlarge"
    assert params["body"]["ProductDescription.1"] == "Linux/UNIX"


def test_listing_errors_keep_the_aws_message(aws, inject) -> None:
    from spotrun.providers.aws import AwsApiError

    inject(aws, "DescribeInstanceTypeOfferings", error=("UnauthorizedOperation", "not allowed to list offerings"))

    with pytest.raises(AwsApiError, match="not allowed to list offerings"):
        aws.zones("g4dn.xlarge")
