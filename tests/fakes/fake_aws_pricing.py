"""A fake of the AWS Price List Query API (`AWSPriceListService.GetProducts`, AWS JSON 1.1) for boto3's `pricing`
client pointed at it (`endpoint_url`): TERM_MATCH filters on product attributes (case-insensitive, as AWS matches
them), pages of `page_size` with a NextToken, and each product a JSON string in `PriceList`, as AWS answers."""

from __future__ import annotations

import json
from typing import Any

from .json_server import JsonServer

TARGET = "AWSPriceListService.GetProducts"


def ec2_product(instance_type: str, region: str, price: float, **attributes: str) -> dict[str, Any]:
    """A Linux, shared-tenancy EC2 product with its on-demand term, as the price list holds it."""
    sku = f"SKU{abs(hash((instance_type, region, price, tuple(sorted(attributes.items()))))) % 10**10}"
    attrs = {
        "instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
        "preInstalledSw": "NA", "capacitystatus": "Used", "licenseModel": "No License required",
        "servicecode": "AmazonEC2", "location": "US East (N. Virginia)", **attributes,
    }
    dimension = {"unit": "Hrs", "pricePerUnit": {"USD": f"{price:.10f}"}, "beginRange": "0", "endRange": "Inf",
                 "description": f"${price} per On Demand {attrs['operatingSystem']} {instance_type} Instance Hour"}
    return {
        "product": {"productFamily": "Compute Instance", "attributes": attrs, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
            "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": dimension}, "sku": sku,
            "effectiveDate": "2024-11-01T00:00:00Z", "offerTermCode": "JRTCKXETXF", "termAttributes": {},
        }}},
        "version": "20241101000000", "publicationDate": "2024-11-01T00:00:00Z",
    }


class FakeAwsPricing(JsonServer):
    content_type = "application/x-amz-json-1.1"

    def __init__(self, products: list[dict[str, Any]] | None = None, page_size: int = 100) -> None:
        super().__init__()
        self.products = list(products or [])
        self.page_size = page_size
        self.requests: list[dict[str, Any]] = []  # each GetProducts body
        self.error: tuple[int, str, str] | None = None  # (status, code, message): answer every request with it

    @property
    def url(self) -> str:
        return self.root

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes) -> tuple[int, Any]:
        return self.answer(headers.get("X-Amz-Target", ""), json.loads(body or b"{}"))

    def answer(self, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        if target != TARGET:
            return 400, {"__type": "UnknownOperationException", "message": f"unknown operation {target}"}
        if self.error is not None:
            status, code, message = self.error
            return status, {"__type": code, "message": message}
        if body.get("ServiceCode") != "AmazonEC2":
            return 200, {"FormatVersion": "aws_v1", "PriceList": []}
        wanted = {f["Field"].lower(): str(f["Value"]).lower() for f in body.get("Filters", [])}
        found = [
            p for p in self.products
            if all(str({k.lower(): v for k, v in p["product"]["attributes"].items()}.get(field, "")).lower() == value
                   for field, value in wanted.items())
        ]
        start = int(body.get("NextToken") or 0)
        page = found[start:start + self.page_size]
        answer: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": [json.dumps(p) for p in page]}
        if start + self.page_size < len(found):
            answer["NextToken"] = str(start + self.page_size)
        return 200, answer

