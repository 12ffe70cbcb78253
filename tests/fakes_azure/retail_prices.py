"""A fake of Azure's Retail Prices API (`GET /api/retail/prices?$filter=...`): a real HTTP server on 127.0.0.1 that
filters its meters by the `eq` clauses of the OData filter (case-insensitive, as the API's default version), and
answers in pages of `page_size` with a `NextPageLink` carrying the filter and a `$skip`, as Azure does."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the fakes' shared server
from fakes.json_server import JsonServer  # noqa: E402

PATH = "/api/retail/prices"
_CLAUSE = re.compile(r"(\w+) eq '([^']*)'")
_FILTER_FIELDS = {"priceType": "type"}  # the filter's name of a meter's field where it differs


def vm_meter(size: str, location: str, price: float, *, spot: bool = False, windows: bool = False,
             low_priority: bool = False, started: str = "2024-01-01T00:00:00Z", **changes: Any) -> dict[str, Any]:
    """One meter as the API lists it, for a VM size ("Standard_NC6s_v3") in a location ("eastus")."""
    short = size.removeprefix("Standard_").replace("_", " ")
    name = short + (" Spot" if spot else " Low Priority" if low_priority else "")
    meter = {
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
        "armRegionName": location, "location": location.upper(), "effectiveStartDate": started,
        "meterId": f"m-{size}-{location}-{name}-{windows}-{started}", "meterName": name, "productId": "DZH318Z0BQPS",
        "skuId": "DZH318Z0BQPS/00TG", "productName": "Virtual Machines NCSv3 Series" + (" Windows" if windows else ""),
        "skuName": name, "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour", "type": "Consumption", "isPrimaryMeterRegion": True, "armSkuName": size,
    }
    meter.update(changes)
    return meter


class FakeRetailPrices(JsonServer):
    def __init__(self, meters: list[dict[str, Any]] | None = None, page_size: int = 100) -> None:
        super().__init__()
        self.meters = list(meters or [])
        self.page_size = page_size
        self.requests: list[dict[str, list[str]]] = []  # each request's query
        self.fail_with: int | None = None  # answer every request with this status

    @property
    def url(self) -> str:
        return f"{self.root}{PATH}"

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes) -> tuple[int, Any]:
        return self.answer(query) if (method, path) == ("GET", PATH) else (404, {"Error": "not found"})

    def answer(self, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        self.requests.append(query)
        if self.fail_with is not None:
            return self.fail_with, {"Error": {"Code": "Throttled", "Message": "too many requests"}}
        clauses = _CLAUSE.findall(query.get("$filter", [""])[0])
        found = [
            m for m in self.meters
            if all(str(m.get(_FILTER_FIELDS.get(k, k), "")).lower() == v.lower() for k, v in clauses)
        ]
        skip = int(query.get("$skip", ["0"])[0])
        page = found[skip:skip + self.page_size]
        more = skip + self.page_size < len(found)
        link = f"{self.url}?{urlencode({'$filter': query['$filter'][0], '$skip': skip + self.page_size})}" if more else None
        return 200, {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                     "Items": page, "NextPageLink": link, "Count": len(page)}

