"""A fake of the Cloud Billing Catalog API's SKU listing (`GET /v1/services/{service}/skus`): a real HTTP server on
127.0.0.1 that answers in pages of `page_size` SKUs with a `nextPageToken`, in the API's JSON (int64 money units
as strings), and records each request's query."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the fakes' shared server
from fakes.json_server import JsonServer  # noqa: E402

COMPUTE_ENGINE_ID = "6F81-5844-456A"


def compute_sku(
    description: str, dollars: float, regions: list[str], *, usage_type: str = "OnDemand", unit: str = "h",
    resource_group: str = "CPU", sku_id: str | None = None, currency: str = "USD",
) -> dict[str, Any]:
    """One Compute Engine SKU as the API lists it, e.g. ("N2 Instance Core running in Americas", 0.031611)."""
    units, nanos = int(dollars), round((dollars - int(dollars)) * 1e9)
    digest = hashlib.sha1(f"{description}|{usage_type}|{','.join(regions)}".encode()).hexdigest().upper()
    sku_id = sku_id or f"{digest[:4]}-{digest[4:8]}-{digest[8:12]}"
    return {
        "name": f"services/{COMPUTE_ENGINE_ID}/skus/{sku_id}", "skuId": sku_id, "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                     "resourceGroup": resource_group, "usageType": usage_type},
        "serviceRegions": regions,
        "pricingInfo": [{
            "summary": "", "effectiveTime": "2026-11-01T00:00:00Z", "currencyConversionRate": 1,
            "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1, "usageUnitDescription": unit, "baseUnit": "s",
                "baseUnitConversionFactor": 3600 if unit == "h" else 3865470566400,
                "tieredRates": [{"startUsageAmount": 0,
                                 "unitPrice": {"currencyCode": currency, "units": str(units), "nanos": nanos}}],
            },
            "aggregationInfo": {"aggregationLevel": "ACCOUNT", "aggregationInterval": "DAILY", "aggregationCount": 1},
        }],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "MULTI_REGIONAL" if len(regions) > 1 else "REGIONAL", "regions": regions},
    }


class FakeBillingCatalog(JsonServer):
    def __init__(self, skus: list[dict[str, Any]] | None = None, page_size: int = 50) -> None:
        super().__init__()
        self.skus = list(skus or [])
        self.page_size = page_size
        self.requests: list[dict[str, list[str]]] = []
        self.failure: tuple[int, str] | None = None  # (status, message) answered instead, while set

    @property
    def url(self) -> str:
        return self.root

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes) -> tuple[int, Any]:
        self.requests.append(query)
        if self.failure is not None:
            status, message = self.failure
            return status, {"error": {"code": status, "message": message, "status": "PERMISSION_DENIED"}}
        if method != "GET" or path != f"/v1/services/{COMPUTE_ENGINE_ID}/skus":
            return 404, {"error": {"code": 404, "message": f"no service at {path}", "status": "NOT_FOUND"}}
        start = int((query.get("pageToken") or ["0"])[0] or 0)
        page = self.skus[start:start + self.page_size]
        following = start + self.page_size
        return 200, {"skus": page, "nextPageToken": str(following) if following < len(self.skus) else ""}
