"""Spot's price per zone as EC2 quotes it, over the catalog's one reference price: asked once per quote's life,
and the catalog's prices stand in where EC2 cannot be asked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from spotrun.costs.market_prices import MarketPrices, catalog_prices

ON_DEMAND = 3.06  # p3.2xlarge, the catalog's
REFERENCE_SPOT = 0.9731


def history(*quotes: tuple[str, str]) -> dict:
    now = datetime.now(timezone.utc)
    return {"SpotPriceHistory": [
        {"AvailabilityZone": zone, "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": price, "Timestamp": now - timedelta(minutes=5)}
        for zone, price in quotes
    ]}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_zones_spot_price_is_ec2s_quote_and_on_demand_the_catalogs(aws_in_process, inject) -> None:
    handler = inject(aws_in_process, "DescribeSpotPriceHistory", body=history(("us-east-1a", "1.1"), ("us-east-1b", "0.84")))
    prices = MarketPrices(lambda cloud: aws_in_process)

    assert prices("aws", "p3.2xlarge", "spot", "us-east-1a") == (1.1, ON_DEMAND)
    assert prices("aws", "p3.2xlarge", "spot", "us-east-1b") == (0.84, ON_DEMAND)
    assert prices("aws", "p3.2xlarge", "spot", "us-east-1c") == (REFERENCE_SPOT, ON_DEMAND)  # not quoted
    assert prices("aws", "p3.2xlarge", "spot", None) == (REFERENCE_SPOT, ON_DEMAND)  # no zone: the reference
    assert prices("aws", "p3.2xlarge", "on-demand", "us-east-1a") == (ON_DEMAND, ON_DEMAND)
    assert len(handler.calls) == 1  # one quote served every zone


def test_the_quote_is_asked_again_once_it_is_older_than_its_life(aws_in_process, inject) -> None:
    clock = Clock()
    first = inject(aws_in_process, "DescribeSpotPriceHistory", body=history(("us-east-1a", "1.1")))
    prices = MarketPrices(lambda cloud: aws_in_process, ttl=300.0, clock=clock)
    assert prices("aws", "p3.2xlarge", "spot", "us-east-1a")[0] == 1.1
    clock.now = 299.0
    assert prices("aws", "p3.2xlarge", "spot", "us-east-1a")[0] == 1.1
    assert len(first.calls) == 1
    aws_in_process.ec2.meta.events.unregister("before-call.ec2.DescribeSpotPriceHistory", first)
    inject(aws_in_process, "DescribeSpotPriceHistory", body=history(("us-east-1a", "0.7")))
    clock.now = 301.0
    assert prices("aws", "p3.2xlarge", "spot", "us-east-1a")[0] == 0.7


def test_a_quote_ec2_refuses_leaves_the_catalogs_prices_for_its_life(aws_in_process, inject, caplog) -> None:
    clock = Clock()
    refused = inject(aws_in_process, "DescribeSpotPriceHistory", error=("UnauthorizedOperation", "not allowed"))
    prices = MarketPrices(lambda cloud: aws_in_process, ttl=300.0, clock=clock)

    assert prices("aws", "p3.2xlarge", "spot", "us-east-1a") == (REFERENCE_SPOT, ON_DEMAND)
    assert prices("aws", "p3.2xlarge", "spot", "us-east-1b") == (REFERENCE_SPOT, ON_DEMAND)
    assert len(refused.calls) == 1  # not asked again at every placement
    assert "not allowed" in caplog.text and "p3.2xlarge" in caplog.text


def test_moto_quotes_every_zone_offering_the_type(aws) -> None:
    prices = MarketPrices(lambda cloud: aws)
    assert set(prices.quotes("aws", "g4dn.xlarge")) == {"us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"}


def test_a_provider_without_quotes_leaves_the_catalog() -> None:
    class NoQuotes:
        pass

    prices = MarketPrices(lambda cloud: NoQuotes())
    assert prices("local", "local.cpu", "spot", "local-b") == catalog_prices("local", "local.cpu", "spot", "local-b")
