"""EC2's on-demand prices from the AWS Price List API, for the instance types spotrun's catalog does not list.

`pricing.get_products` (boto3, the Price List Query API, served from us-east-1) answers the products that match its
filters with their terms as JSON. An instance type in a region has one Linux, shared-tenancy, no-licence,
no-preinstalled-software product whose capacity status is "Used" (the others price reservations' unused capacity
and the like); its OnDemand term's hourly dimension is the price. Spot is not here: EC2 quotes it per zone (the
provider's `spot_prices`, `costs.market_prices.MarketPrices`). Asked at most once an hour per region and type,
and after a failure not again for 5 minutes; it needs AWS credentials, as the rest of spotrun's EC2 calls do.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from typing import Any

from spotrun.costs.catalog import LIST_RETRY_AFTER, UnknownPrice
from spotrun.costs.zone_regions import ZoneNames
from spotrun.ttl_cache import TtlCache

PRICING_REGION = "us-east-1"  # where the Price List Query API is served (also ap-south-1, eu-central-1)
URL_ENV_VAR = "SPOTRUN_AWS_PRICING_URL"  # another endpoint (tests' fake)
DEFAULT_ENDPOINT: str | None = None  # None: AWS's own
REGION_ENV_VARS = ("SPOTRUN_AWS_REGION", "AWS_REGION", "AWS_DEFAULT_REGION")  # where a job with no zone is priced
PRICES_LAST = 3600.0
MAX_PAGES = 10
_PRODUCT_FILTERS = {
    "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
    "licenseModel": "No License required",
}


AWS_ZONES = ZoneNames(
    "AWS", "region", re.compile(r"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)(?:-[a-z]+-\d+)?[a-z]"),  # us-east-1a, us-west-2-lax-1a
    "an AWS availability zone such as us-east-1a", REGION_ENV_VARS,
)
region_of = AWS_ZONES.region_of


class OnDemandPrices:
    """Answers are kept for `ttl`; a failure is UnknownPrice, saying why, answered again without asking for
    `retry_after`."""

    def __init__(
        self, *, client_factory: Callable[[], Any] | None = None, ttl: float = PRICES_LAST,
        retry_after: float = LIST_RETRY_AFTER, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory or _pricing_client
        self._cache: TtlCache[float] = TtlCache(ttl, clock, failure_seconds=retry_after)

    def price(self, region: str, instance_type: str) -> float:
        """$/h of `instance_type` on-demand (Linux) in `region`; UnknownPrice saying why when it cannot be had."""
        return self._cache.get((_endpoint(), region, instance_type), lambda: self._ask(region, instance_type))

    def _ask(self, region: str, instance_type: str) -> float:
        attributes = {**_PRODUCT_FILTERS, "instanceType": instance_type, "regionCode": region}
        filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in attributes.items()]
        from botocore.exceptions import BotoCoreError, ClientError  # here: boto3 costs the CLI's start ~0.15 s

        prices: list[float] = []
        try:
            client = self._client_factory()
            request: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1"}
            for _ in range(MAX_PAGES):
                page = client.get_products(**request)
                prices.extend(p for product in page.get("PriceList", []) if (p := _hourly(product)) is not None)
                if not page.get("NextToken"):
                    break
                request["NextToken"] = page["NextToken"]
        except (BotoCoreError, ClientError) as error:
            raise UnknownPrice(f"EC2's price list for {instance_type} in {region} could not be read ({error})") from None
        if not prices:
            raise UnknownPrice(f"EC2's price list has no Linux on-demand price for {instance_type} in {region}")
        return max(prices)  # one product is expected; of several, the dearest: the bill is never under-reported


def _hourly(item: Any) -> float | None:
    """The USD price per hour of a product's on-demand term, if it has one (boto3 hands each product over as the
    JSON text AWS sent)."""
    try:
        product = json.loads(item) if isinstance(item, str) else item
    except ValueError:
        return None
    if not isinstance(product, dict):
        return None
    for term in (product.get("terms") or {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = (dimension.get("pricePerUnit") or {}).get("USD")
            if dimension.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                return float(usd)
    return None


def _endpoint() -> str | None:
    return os.environ.get(URL_ENV_VAR) or DEFAULT_ENDPOINT


def _pricing_client() -> Any:
    import boto3
    from botocore.config import Config

    # a job waits on this at launch: two tries, short timeouts (an unreachable list costs seconds, not a minute)
    config = Config(retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=5, read_timeout=15)
    return boto3.Session().client("pricing", region_name=PRICING_REGION, endpoint_url=_endpoint(), config=config)


ON_DEMAND_PRICES = OnDemandPrices()  # one cache per process


def aws_on_demand(instance_type: str, zone: str | None) -> float:
    """$/h on-demand of an EC2 type the catalog does not list, from EC2's price list in the zone's region."""
    try:
        return ON_DEMAND_PRICES.price(region_of(zone), instance_type)
    except UnknownPrice as unknown:
        raise UnknownPrice(f"no price for instance type {instance_type!r} on aws in spotrun's catalog, and {unknown}") from None
