"""EC2's on-demand prices from the AWS Price List API (`costs/aws_pricing.py`), through boto3's `pricing` client
against a fake of the API, for types spotrun's catalog lacks; spot for them from EC2's quote per zone
(`MarketPrices`). Every way of not getting a price is an UnknownPrice that says why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes
from fakes import FakeAwsPricing, ec2_product  # noqa: E402
from fakes.boto_models import share_botocore_loader  # noqa: E402

from spotrun.control import jobs  # noqa: E402
from spotrun.costs.aws_pricing import OnDemandPrices, region_of  # noqa: E402
from spotrun.costs.catalog import UnknownPrice  # noqa: E402
from spotrun.costs.market_prices import MarketPrices, catalog_prices  # noqa: E402
from spotrun.spec import SpecError, parse_spec  # noqa: E402

PRODUCTS = [
    ec2_product("g5.xlarge", "us-east-1", 1.006),
    ec2_product("g5.xlarge", "us-east-1", 1.19, operatingSystem="Windows"),
    ec2_product("g5.xlarge", "us-east-1", 1.006, capacitystatus="UnusedCapacityReservation"),
    ec2_product("g5.xlarge", "us-east-1", 1.40, tenancy="Dedicated"),
    ec2_product("g5.xlarge", "eu-west-1", 1.123),
    ec2_product("g4dn.xlarge", "us-east-1", 0.526),
]


@pytest.fixture
def price_list(monkeypatch):
    for name, value in (("AWS_ACCESS_KEY_ID", "AKIAFAKEPRICING00000"), ("AWS_SECRET_ACCESS_KEY", "fake"),
                        ("AWS_EC2_METADATA_DISABLED", "true")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    share_botocore_loader(monkeypatch)  # each price read makes a boto3 session of its own
    with FakeAwsPricing(PRODUCTS, page_size=1) as fake:
        monkeypatch.setenv("SPOTRUN_AWS_PRICING_URL", fake.url)
        yield fake


def test_the_linux_shared_price_of_a_type_the_catalog_lacks(price_list):
    assert catalog_prices("aws", "g5.xlarge", "on-demand", "us-east-1c") == (1.006, 1.006)
    assert catalog_prices("aws", "g5.xlarge", "on-demand", "eu-west-1a") == (1.123, 1.123)
    sent = {f["Field"]: f["Value"] for f in price_list.requests[0]["Filters"]}
    assert sent == {"instanceType": "g5.xlarge", "regionCode": "us-east-1", "operatingSystem": "Linux",
                    "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
                    "licenseModel": "No License required"}
    assert price_list.requests[0]["ServiceCode"] == "AmazonEC2"
    assert catalog_prices("aws", "p3.2xlarge", "on-demand", "us-east-1a") == (3.06, 3.06)  # the catalog's own
    assert len(price_list.requests) == 2


def test_pages_are_followed_and_the_answer_kept_an_hour(price_list):
    price_list.products.insert(0, ec2_product("g5.xlarge", "us-east-1", 0.5, operatingSystem="RHEL"))
    now = [0.0]
    prices = OnDemandPrices(clock=lambda: now[0])
    assert prices.price("us-east-1", "g5.xlarge") == 1.006 and len(price_list.requests) == 1
    price_list.page_size = 100
    price_list.products[1] = ec2_product("g5.xlarge", "us-east-1", 1.05)
    assert prices.price("us-east-1", "g5.xlarge") == 1.006 and len(price_list.requests) == 1
    now[0] = 3600.0
    assert prices.price("us-east-1", "g5.xlarge") == 1.05


def test_spot_of_such_a_type_is_ec2s_quote_per_zone(price_list, monkeypatch):
    monkeypatch.setenv("SPOTRUN_AWS_REGION", "us-east-1")

    class Quoting:
        def spot_prices(self, instance_type):
            return {"us-east-1a": 0.45, "us-east-1b": 0.39}

    prices = MarketPrices(lambda cloud: Quoting())
    assert prices("aws", "g5.xlarge", "spot", "us-east-1a") == (0.45, 1.006)
    assert prices("aws", "g5.xlarge", "spot", None) == (0.39, 1.006)  # the reference: the cheapest zone's
    with pytest.raises(UnknownPrice, match="EC2's quote"):
        catalog_prices("aws", "g5.xlarge", "spot", "us-east-1a")  # no quote: not priced


@pytest.mark.parametrize(("instance_type", "zone", "why"), [
    ("g5.xlarge", "ap-south-1a", "no Linux on-demand price for g5.xlarge in ap-south-1"),
    ("m9.imaginary", "us-east-1a", "no Linux on-demand price for m9.imaginary"),
    ("g5.xlarge", "East US", "not an AWS availability zone"),
])
def test_what_the_list_does_not_price_is_unknown_and_says_why(price_list, instance_type, zone, why):
    with pytest.raises(UnknownPrice, match=why):
        catalog_prices("aws", instance_type, "on-demand", zone)


def test_a_list_that_refuses_or_cannot_be_reached_is_unknown(price_list, monkeypatch):
    price_list.error = (400, "AccessDeniedException", "not authorized to perform pricing:GetProducts")
    with pytest.raises(UnknownPrice, match="could not be read.*pricing:GetProducts"):
        OnDemandPrices().price("us-east-1", "g5.xlarge")
    monkeypatch.setenv("SPOTRUN_AWS_PRICING_URL", "http://127.0.0.1:9")
    with pytest.raises(UnknownPrice, match="could not be read"):
        OnDemandPrices().price("us-east-1", "g5.xlarge")


def test_a_failed_read_stands_five_minutes_before_the_list_is_asked_again():
    """As GCP's price list: a controller without pricing:GetProducts asks once in a while, not at every placement."""
    from botocore.exceptions import ClientError

    now, asked = [0.0], []

    class RefusingPriceList:
        def get_products(self, **request):
            asked.append(request)
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "GetProducts")

    prices = OnDemandPrices(client_factory=RefusingPriceList, clock=lambda: now[0])
    for moment in (0.0, 1.0, 299.0):
        now[0] = moment
        with pytest.raises(UnknownPrice, match="could not be read.*not authorized"):
            prices.price("us-east-1", "g5.xlarge")
    assert len(asked) == 1
    now[0] = 301.0
    with pytest.raises(UnknownPrice, match="not authorized"):
        prices.price("us-east-1", "g5.xlarge")
    assert len(asked) == 2


def test_the_region_of_a_zone_or_of_the_environment(monkeypatch):
    assert region_of("us-west-2-lax-1a") == "us-west-2" and region_of("ap-southeast-2c") == "ap-southeast-2"
    for name in ("SPOTRUN_AWS_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UnknownPrice, match="no AWS region"):
        region_of(None)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert region_of(None) == "eu-west-1"


def test_an_aws_job_of_such_a_type_is_launched_without_its_own_prices_or_refused_naming_them(price_list, monkeypatch,
                                                                                             store):
    monkeypatch.setenv("SPOTRUN_AWS_REGION", "us-east-1")
    text = "run: 'true'\nresources: {cloud: aws, instance_type: g5.xlarge}\n"
    assert jobs.submit(store, parse_spec(text), 0.0, source="job.yaml") > 0
    with pytest.raises(SpecError) as refused:
        jobs.submit(store, parse_spec(text.replace("g5.xlarge", "m9.imaginary")), 0.0, source="job.yaml")
    [problem] = refused.value.problems
    assert problem.field == "resources.instance_type" and "resources.prices" in problem.message
