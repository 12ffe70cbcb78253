"""The price catalog: what an hour of an instance type costs, on-demand and spot, per cloud and zone.

Sources: the "Can't Be Late" paper (NSDI'24) for p3.2xlarge in us-west-2 and the product's founding
documents for the other AWS and GCP prices (both quoted in /work/shared/traces/README.md). AWS prices are
us-west-2's and apply to every zone asked about; GCP prices are per GPU (us-west1), the VM itself not
included, and GCP's preemptible/Spot VMs are the "spot" market. The local cloud's types mirror AWS ones,
with a small per-zone spread of the spot price so that zone choice matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from spotrun.gcp_accelerators import accelerator_type

MARKETS = ("spot", "on-demand")
# seconds a cloud's price list that could not be read (no credentials, an outage) stands unread before it is asked
# again: a controller asks once in a while, not at every placement
LIST_RETRY_AFTER = 300.0


class UnknownPrice(KeyError):
    """No price for this cloud / instance type / zone; the message says which is unknown."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown price"


@dataclass(frozen=True)
class PriceEntry:
    on_demand: float  # $/h
    spot: float  # $/h, the reference spot price
    spot_by_zone: Mapping[str, float] = field(default_factory=dict)  # empty: every zone pays `spot`

    def spot_in(self, zone: str | None) -> float:
        if zone is None or not self.spot_by_zone:
            return self.spot
        return self.spot_by_zone[zone]


_LOCAL_ZONES_SPOT_FACTOR = {"local-a": 1.0, "local-b": 1.02 / 0.9731, "local-c": 0.95 / 0.9731}


def _local(on_demand: float, spot: float) -> PriceEntry:
    spread = {zone: round(spot * factor, 4) for zone, factor in _LOCAL_ZONES_SPOT_FACTOR.items()}
    return PriceEntry(on_demand=on_demand, spot=spot, spot_by_zone=MappingProxyType(spread))


CATALOG: Mapping[str, Mapping[str, PriceEntry]] = MappingProxyType({
    "local": MappingProxyType({
        "local.cpu": _local(3.06, 0.9731),  # mirrors p3.2xlarge: local-a 0.9731, local-b 1.02, local-c 0.95
        "local.gpu": _local(12.24, 3.672),  # mirrors p3.8xlarge (4×V100)
    }),
    "aws": MappingProxyType({
        "p3.2xlarge": PriceEntry(on_demand=3.06, spot=0.9731),  # 1×V100
        "p3.8xlarge": PriceEntry(on_demand=12.24, spot=3.672),  # 4×V100, spot floor
        "p2.xlarge": PriceEntry(on_demand=0.90, spot=0.27),  # 1×K80
        "p2.8xlarge": PriceEntry(on_demand=14.40, spot=4.32),  # 8×K80
    }),
    "gcp": MappingProxyType({
        # per GPU, GCP's accelerator type names (attached to a VM; billed on top of its machine type)
        "nvidia-tesla-k80": PriceEntry(on_demand=0.45, spot=0.135),
        "nvidia-tesla-p100": PriceEntry(on_demand=1.46, spot=0.43),
        "nvidia-tesla-v100": PriceEntry(on_demand=2.48, spot=0.74),
        # machine types, GCP's public list prices for us-central1 (spot prices move; these are typical)
        "n1-standard-4": PriceEntry(on_demand=0.19, spot=0.04),
        "n1-standard-8": PriceEntry(on_demand=0.38, spot=0.08),
        "n1-standard-16": PriceEntry(on_demand=0.76, spot=0.16),
    }),
})


def lists(cloud: str, instance_type: str) -> bool:
    """Whether the catalog holds a price for the instance type on the cloud."""
    return instance_type in CATALOG.get(cloud, {})


def entry(cloud: str, instance_type: str) -> PriceEntry:
    types = CATALOG.get(cloud)
    if types is None:
        raise UnknownPrice(f"no prices for cloud {cloud!r}; known clouds: {', '.join(sorted(CATALOG))}")
    found = types.get(instance_type)
    if found is None:
        raise UnknownPrice(
            f"no price for instance type {instance_type!r} on {cloud}; known: {', '.join(sorted(types))}"
        )
    return found


def price(cloud: str, instance_type: str, market: str, zone: str | None = None) -> float:
    """$/h of one instance of `instance_type` in `market` ("spot" or "on-demand"), in `zone` if given."""
    found = entry(cloud, instance_type)
    if market == "on-demand":
        return found.on_demand
    if market != "spot":
        raise ValueError(f"unknown market {market!r}; expected one of {', '.join(MARKETS)}")
    try:
        return found.spot_in(zone)
    except KeyError:
        raise UnknownPrice(
            f"no spot price for {instance_type} in zone {zone!r} on {cloud}; "
            f"zones: {', '.join(sorted(found.spot_by_zone))}"
        ) from None


def on_demand_price(cloud: str, instance_type: str) -> float:
    return entry(cloud, instance_type).on_demand


def machine_price(
    cloud: str, instance_type: str, accelerators: Mapping[str, int] | None, market: str, zone: str | None = None
) -> float:
    """$/h of an instance plus the accelerators attached to it (GCP bills GPUs apart from the VM)."""
    total = price(cloud, instance_type, market, zone)
    if cloud == "gcp":
        for name, count in (accelerators or {}).items():
            total += count * price(cloud, gcp_accelerator(name), market)
    return total


def gcp_accelerator(name: str) -> str:
    """A job file's GPU name ("V100") as GCE's accelerator type; UnknownPrice for a name GCE does not know."""
    try:
        return accelerator_type(name)
    except ValueError as unknown:
        raise UnknownPrice(str(unknown)) from None


def instance_types(cloud: str) -> list[str]:
    if cloud not in CATALOG:
        raise UnknownPrice(f"no prices for cloud {cloud!r}; known clouds: {', '.join(sorted(CATALOG))}")
    return sorted(CATALOG[cloud])
