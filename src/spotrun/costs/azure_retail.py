"""Azure's VM prices from its public Retail Prices API, for the instance types spotrun's catalog does not list.

`GET https://prices.azure.com/api/retail/prices?$filter=...` needs no credentials and answers pages of meters
(`Items`, `NextPageLink`). A VM size in a location has a Linux meter per market: pay-as-you-go ("NC6s v3"), Spot
("NC6s v3 Spot") and the retired Low Priority; Windows meters carry the licence too and are left out, as are
reservations and savings plans (not "Consumption"). Azure prices spot per location, not per zone: every zone of a
location ("eastus-1", ...) pays the location's price. Prices are read at most once an hour per location and size,
and after a failure not again for 5 minutes.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from spotrun.costs.catalog import LIST_RETRY_AFTER, UnknownPrice
from spotrun.costs.zone_regions import ZoneNames
from spotrun.ttl_cache import TtlCache

RETAIL_PRICES_URL = "https://prices.azure.com/api/retail/prices"
URL_ENV_VAR = "SPOTRUN_AZURE_PRICES_URL"
LOCATION_ENV_VAR = "SPOTRUN_AZURE_LOCATION"  # the provider's location: where a job with no zone yet is priced
PRICES_LAST = 3600.0
MAX_PAGES = 20  # a location and size has a few dozen meters; a listing longer than this is not what was asked
_NAME = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class VmPrices:
    on_demand: float  # $/h, Linux pay-as-you-go
    spot: float | None  # $/h, Linux Spot (None: the size has no Spot meter there)


AZURE_ZONES = ZoneNames(
    "Azure", "location", re.compile(r"(?P<region>[a-z0-9]+)(?:-\d+)?"),  # eastus-2, or eastus for a size without zones
    "an Azure zone such as eastus-1", (LOCATION_ENV_VAR,),
)
location_of = AZURE_ZONES.region_of


class RetailPrices:
    """Answers are kept for `ttl`; a failure is UnknownPrice, saying why, answered again without asking for
    `retry_after`."""

    def __init__(
        self, url: str | None = None, *, timeout: float = 10.0, ttl: float = PRICES_LAST,
        retry_after: float = LIST_RETRY_AFTER, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._cache: TtlCache[VmPrices] = TtlCache(ttl, clock, failure_seconds=retry_after)

    def vm_prices(self, location: str, size: str) -> VmPrices:
        """The size's Linux prices in the location; UnknownPrice (saying why) when they cannot be had."""
        if not _NAME.fullmatch(size) or not _NAME.fullmatch(location):
            raise UnknownPrice(f"no Azure price for {size!r} in {location!r}: not a VM size and location name")
        url = self._url or os.environ.get(URL_ENV_VAR) or RETAIL_PRICES_URL
        return self._cache.get(
            (url, location.lower(), size.lower()), lambda: _vm_prices(list(self._meters(url, location, size)), location, size),
        )

    def _meters(self, first_page: str, location: str, size: str) -> Iterator[dict[str, Any]]:
        query = (f"serviceName eq 'Virtual Machines' and armRegionName eq '{location}' and armSkuName eq '{size}' "
                 "and priceType eq 'Consumption'")
        import httpx  # here, not at the top: the CLI imports this module and seldom prices on Azure

        url: str | None = first_page
        params: dict[str, str] | None = {"$filter": query}
        try:
            with httpx.Client(timeout=self._timeout) as client:
                for _ in range(MAX_PAGES):
                    if url is None:
                        return
                    response = client.get(url, params=params)
                    response.raise_for_status()
                    page = response.json()
                    yield from page.get("Items") or []
                    url, params = page.get("NextPageLink"), None  # the link carries the filter and the skip
        except (httpx.HTTPError, ValueError) as error:
            raise UnknownPrice(f"Azure's retail prices for {size} in {location} could not be read ({error})") from None


def _vm_prices(meters: list[dict[str, Any]], location: str, size: str) -> VmPrices:
    """The newest Linux hourly meter of each market among the size's meters in the location."""
    newest: dict[str, tuple[str, float]] = {}
    for meter in meters:
        market = _market(meter)
        if market is None:
            continue
        started, price = str(meter.get("effectiveStartDate", "")), float(meter["retailPrice"])
        if market not in newest or started > newest[market][0]:
            newest[market] = (started, price)
    if "on-demand" not in newest:
        raise UnknownPrice(f"Azure lists no Linux pay-as-you-go price for {size} in {location}")
    spot = newest.get("spot")
    return VmPrices(on_demand=newest["on-demand"][1], spot=spot[1] if spot else None)


def _market(meter: dict[str, Any]) -> str | None:
    """"spot" or "on-demand" for a Linux hourly meter in USD, else None (Windows, Low Priority, other units)."""
    if meter.get("type") != "Consumption" or meter.get("unitOfMeasure") != "1 Hour":
        return None
    if meter.get("currencyCode", "USD") != "USD" or str(meter.get("productName", "")).endswith("Windows"):
        return None
    name = str(meter.get("meterName", ""))
    if "Low Priority" in name:
        return None
    return "spot" if name.endswith(" Spot") else "on-demand"


RETAIL_PRICES = RetailPrices()  # one cache per process: every job priced on Azure shares it


def azure_prices(instance_type: str, market: str, zone: str | None) -> tuple[float, float]:
    """($/h in `market`, $/h on-demand) of an Azure VM size in the zone's location (`catalog_prices`' shape)."""
    location = location_of(zone)
    prices = RETAIL_PRICES.vm_prices(location, instance_type)
    if market == "on-demand":
        return prices.on_demand, prices.on_demand
    if prices.spot is None:
        raise UnknownPrice(f"Azure lists no Spot price for {instance_type} in {location}")
    return prices.spot, prices.on_demand
