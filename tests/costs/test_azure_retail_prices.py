"""Azure's VM prices from its Retail Prices API (`costs/azure_retail.py`), against a fake that speaks its protocol:
Linux pay-as-you-go and Spot meters picked from Windows, Low Priority and older ones, pages followed, the answer
cached, and every way of not getting a price an UnknownPrice that says why (a job is then refused naming
resources.prices)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes_azure
from fakes_azure import FakeRetailPrices, vm_meter  # noqa: E402

from spotrun.control import jobs  # noqa: E402
from spotrun.costs.azure_retail import RetailPrices, azure_prices, location_of  # noqa: E402
from spotrun.costs.catalog import UnknownPrice  # noqa: E402
from spotrun.costs.market_prices import catalog_prices  # noqa: E402
from spotrun.spec import SpecError, parse_spec  # noqa: E402

SIZE = "Standard_NC6s_v3"
METERS = [
    vm_meter(SIZE, "eastus", 3.06),
    vm_meter(SIZE, "eastus", 0.3157, spot=True),
    vm_meter(SIZE, "eastus", 0.2900, spot=True, started="2022-06-01T00:00:00Z"),  # an older Spot price
    vm_meter(SIZE, "eastus", 3.52, windows=True),
    vm_meter(SIZE, "eastus", 0.61, low_priority=True),
    vm_meter(SIZE, "eastus", 0.92, spot=True, unitOfMeasure="1/Month"),
    vm_meter(SIZE, "westus2", 3.10),
    vm_meter("Standard_D2s_v5", "eastus", 0.096),
]


@pytest.fixture
def retail(monkeypatch):
    with FakeRetailPrices(METERS, page_size=2) as fake:
        monkeypatch.setenv("SPOTRUN_AZURE_PRICES_URL", fake.url)
        yield fake


def test_the_linux_hourly_prices_of_the_size_in_the_zones_location(retail):
    assert catalog_prices("azure", SIZE, "spot", "eastus-2") == (0.3157, 3.06)
    assert catalog_prices("azure", SIZE, "on-demand", "eastus-1") == (3.06, 3.06)
    assert catalog_prices("azure", SIZE.lower(), "on-demand", "westus2") == (3.10, 3.10)  # a location without zones
    query = retail.requests[0]["$filter"][0]
    assert "armRegionName eq 'eastus'" in query and f"armSkuName eq '{SIZE}'" in query
    assert "priceType eq 'Consumption'" in query and "serviceName eq 'Virtual Machines'" in query


def test_every_page_is_read_and_the_answer_kept_an_hour(retail):
    now = [0.0]
    prices = RetailPrices(retail.url, clock=lambda: now[0])
    assert prices.vm_prices("eastus", SIZE).spot == 0.3157
    pages = len(retail.requests)
    assert pages == 3  # 6 meters of the size there, 2 a page
    retail.meters[1] = vm_meter(SIZE, "eastus", 0.40, spot=True)
    assert prices.vm_prices("eastus", SIZE).spot == 0.3157 and len(retail.requests) == pages
    now[0] = 3600.0
    assert prices.vm_prices("eastus", SIZE).spot == 0.40


def test_a_job_without_a_zone_yet_is_priced_in_the_providers_location(retail, monkeypatch):
    monkeypatch.setenv("SPOTRUN_AZURE_LOCATION", "eastus")
    assert azure_prices(SIZE, "spot", None) == (0.3157, 3.06)
    monkeypatch.delenv("SPOTRUN_AZURE_LOCATION")
    with pytest.raises(UnknownPrice, match="SPOTRUN_AZURE_LOCATION"):
        azure_prices(SIZE, "spot", None)
    assert location_of("westeurope-3") == "westeurope"


@pytest.mark.parametrize(("size", "zone", "why"), [
    ("Standard_NC6s_v3", "centralindia-1", "no Linux pay-as-you-go price for Standard_NC6s_v3 in centralindia"),
    ("Standard_D2s_v5", "eastus-1", "no Spot price for Standard_D2s_v5 in eastus"),
    ("Standard_NC6s_v3' or 'x", "eastus-1", "not a VM size"),
    ("Standard_NC6s_v3", "East US", "not an Azure zone"),
])
def test_what_azure_does_not_price_is_unknown_and_says_why(retail, size, zone, why):
    with pytest.raises(UnknownPrice, match=why):
        catalog_prices("azure", size, "spot", zone)


def test_an_unreachable_or_failing_price_list_is_unknown_too(retail):
    retail.fail_with = 429
    with pytest.raises(UnknownPrice, match="could not be read.*429"):
        RetailPrices(retail.url).vm_prices("eastus", SIZE)
    with pytest.raises(UnknownPrice, match="could not be read"):
        RetailPrices("http://127.0.0.1:9/api/retail/prices", timeout=2).vm_prices("eastus", SIZE)


def test_a_failed_read_stands_five_minutes_before_the_list_is_asked_again(retail):
    """As GCP's price list: an outage of the list is asked about once in a while, not at every placement."""
    now = [0.0]
    prices = RetailPrices(retail.url, clock=lambda: now[0])
    retail.fail_with = 503
    for moment in (0.0, 1.0, 299.0):
        now[0] = moment
        with pytest.raises(UnknownPrice, match="could not be read.*503"):
            prices.vm_prices("eastus", SIZE)
    assert len(retail.requests) == 1
    retail.fail_with = None
    now[0] = 301.0
    assert prices.vm_prices("eastus", SIZE).spot == 0.3157


def test_an_azure_job_is_priced_without_its_own_prices_or_refused_naming_them(retail, monkeypatch, store):
    monkeypatch.setenv("SPOTRUN_AZURE_LOCATION", "eastus")
    text = f"run: 'true'\nresources: {{cloud: azure, instance_type: {SIZE}}}\n"
    assert jobs.submit(store, parse_spec(text), 0.0, source="job.yaml") > 0
    monkeypatch.setenv("SPOTRUN_AZURE_LOCATION", "centralindia")
    with pytest.raises(SpecError) as refused:
        jobs.submit(store, parse_spec(text), 0.0, source="job.yaml")
    [problem] = refused.value.problems
    assert problem.field == "resources.instance_type" and "resources.prices" in problem.message
    assert "centralindia" in problem.message
