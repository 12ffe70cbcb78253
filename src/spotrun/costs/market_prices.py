"""Spot's price per zone as the cloud quotes it now, over the catalog's.

The catalog holds one reference spot price per instance type (AWS: us-west-2's), but EC2 prices each zone's spot
apart and moves the prices over days. Where a provider can quote them (`spot_prices`: EC2's spot price history),
a placement weighs, and an attempt records, the zone's quoted price. The quote is asked at most once per `ttl` per
cloud and instance type: every placement of every job reads it, and the cloud limits how often it may be asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from spotrun.costs import catalog
from spotrun.costs.aws_pricing import aws_on_demand
from spotrun.costs.azure_retail import azure_prices
from spotrun.costs.catalog import UnknownPrice
from spotrun.costs.gcp_billing import gcp_prices
from spotrun.kubernetes_flavors import FLAVOR_ENV_VAR, NODES_CLOUD_ENV_VAR, nodes_cloud

log = logging.getLogger(__name__)

PriceFunction = Callable[..., tuple[float, float]]  # (cloud, type, market, zone, accelerators) -> ($/h, on-demand $/h)
QUOTES_LAST = 300.0  # seconds a quote is used: every ask is an API call, and spot prices move over hours, not minutes


def catalog_prices(
    cloud: str, instance_type: str, market: str, zone: str | None, accelerators: Mapping[str, int] | None = None,
) -> tuple[float, float]:
    """($/h in that market and zone (None: the reference spot price), $/h on-demand) from the catalog, attached
    accelerators included; Azure's from its public retail prices (`azure_retail`), which the catalog does not hold;
    a GCE machine from GCP's billing catalog (`gcp_billing`) in its region, or the catalog's where that cannot be
    read and the catalog lists the machine and its GPUs; and on-demand's of an EC2 type
    it does not list from EC2's price list (`aws_pricing`; spot's is EC2's quote per zone, `MarketPrices`). A
    Kubernetes job costs what its node costs on the cloud the cluster's nodes come from (`kubernetes_flavors`)."""
    if cloud == "kubernetes":
        return catalog_prices(_kubernetes_nodes_cloud(), instance_type, market, zone, accelerators)
    if cloud == "azure":
        return azure_prices(instance_type, market, zone)
    if cloud == "gcp":
        try:  # the zone's region's list prices: the catalog's are us-central1's
            return gcp_prices(instance_type, market, zone, accelerators)
        except UnknownPrice as unknown:
            if not _catalog_lists_gcp(instance_type, accelerators):
                raise
            log.debug("GCP's list prices of %s in %s: %s; the catalog's stand in", instance_type, zone, unknown)
    if cloud == "aws" and not catalog.lists(cloud, instance_type):
        on_demand = aws_on_demand(instance_type, zone)
        if market == "on-demand":
            return on_demand, on_demand
        raise UnknownPrice(f"no spot price for {instance_type} on aws but EC2's quote in a zone")
    return (
        catalog.machine_price(cloud, instance_type, accelerators, market, zone),
        catalog.machine_price(cloud, instance_type, accelerators, "on-demand"),
    )


def _kubernetes_nodes_cloud() -> str:
    try:
        cloud = nodes_cloud()
    except ValueError as error:
        raise UnknownPrice(str(error)) from None
    if cloud is None:
        raise UnknownPrice(
            f"a Kubernetes job is priced as its nodes: set {FLAVOR_ENV_VAR} or {NODES_CLOUD_ENV_VAR} (aws, gcp, azure)"
        )
    return cloud


def _catalog_lists_gcp(instance_type: str, accelerators: Mapping[str, int] | None) -> bool:
    try:
        gpus = [catalog.gcp_accelerator(name) for name in accelerators or {}]
    except UnknownPrice:
        return False
    return all(catalog.lists("gcp", name) for name in [instance_type, *gpus])


class MarketPrices:
    """A price function (`catalog_prices`'s signature) that takes spot's $/h in a zone from the cloud's quote where
    its provider gives one, else from the catalog. A quote that fails is logged and not asked again for `ttl`: the
    catalog's prices stand in meanwhile."""

    def __init__(
        self, provider: Callable[[str], Any], fallback: PriceFunction = catalog_prices, *,
        ttl: float = QUOTES_LAST, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._provider = provider
        self._fallback = fallback
        self._ttl = ttl
        self._clock = clock
        self._quotes: dict[tuple[str, str], tuple[float, Mapping[str, float]]] = {}
        self._lock = threading.Lock()  # a controller's workers place jobs at once

    def __call__(
        self, cloud: str, instance_type: str, market: str, zone: str | None,
        accelerators: Mapping[str, int] | None = None,
    ) -> tuple[float, float]:
        if market == "spot" and zone is not None:
            quoted = self.quotes(cloud, instance_type).get(zone)
            if quoted is not None:  # the whole machine's price, as EC2 quotes it
                return quoted, self._fallback(cloud, instance_type, "on-demand", zone, accelerators)[1]
        try:
            return self._fallback(cloud, instance_type, market, zone, accelerators)
        except UnknownPrice:
            quotes = self.quotes(cloud, instance_type) if market == "spot" and zone is None else {}
            if not quotes:
                raise
            # a type only the cloud prices: its cheapest zone's quote is the job's reference spot price
            return min(quotes.values()), self._fallback(cloud, instance_type, "on-demand", None, accelerators)[1]

    def quotes(self, cloud: str, instance_type: str) -> Mapping[str, float]:
        """Spot's $/h per zone as the cloud quoted it within `ttl` (empty: it gives no quotes, or could not)."""
        key, now = (cloud, instance_type), self._clock()
        with self._lock:
            asked = self._quotes.get(key)
            if asked is not None and now - asked[0] < self._ttl:
                return asked[1]
            quoted = self._ask(cloud, instance_type)
            self._quotes[key] = (now, quoted)
            return quoted

    def _ask(self, cloud: str, instance_type: str) -> Mapping[str, float]:
        provider = self._provider(cloud)
        ask = getattr(provider, "spot_prices", None)
        if ask is None:
            return {}
        try:
            return dict(ask(instance_type))
        except Exception as error:  # a missing permission or an outage: the catalog's prices stand in
            log.warning("no spot price quote for %s on %s (%s); the catalog's prices stand in for %.0f s",
                        instance_type, cloud, error, self._ttl)
            return {}
