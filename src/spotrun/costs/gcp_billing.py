"""Compute Engine's list prices from the Cloud Billing Catalog API, for the machine types and GPUs spotrun's catalog
does not list.

GCE bills a VM by its parts, at rates set per region: each vCPU-hour and each GiB-hour of memory at its machine
family's rate ("N2 Instance Core running in Americas", "N2 Instance Ram ..."), each GPU at its model's ("Nvidia L4
GPU running in ..."); a Spot VM at the rates of the SKUs whose usage type is "Preemptible" ("Spot Preemptible N2
Instance Core ..."). A machine type's parts (vCPUs, memory, the GPUs it comes with) are Compute Engine's
machineTypes; a custom type's are in its name (n2-custom-8-16384). The catalog has no filter: `list_skus` lists
every Compute Engine SKU, a few thousand, so they are read at most once an hour per process and indexed by region.
Shared-core types (e2-small, f1-micro), extended memory and sole tenancy have SKUs of other shapes and are not
priced here: such a job gives `resources.prices`.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotrun.costs.catalog import LIST_RETRY_AFTER, UnknownPrice, gcp_accelerator
from spotrun.costs.zone_regions import ZoneNames
from spotrun.ttl_cache import TtlCache

COMPUTE_ENGINE = "services/6F81-5844-456A"  # the Cloud Billing Catalog's id of the Compute Engine service
REGION_ENV_VAR = "SPOTRUN_GCP_REGION"  # where a job with no zone yet is priced
PRICES_LAST = 3600.0
_MARKETS = {"OnDemand": "on-demand", "Preemptible": "spot"}
_UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h"}
_GPU_SKU = re.compile(
    r"(?:Spot )?(?:Preemptible )?Nvidia (?P<model>.+?) GPU(?: attached to (?:Spot )?Preemptible VMs)? running in [^()]+",
    re.IGNORECASE,
)
_PART_SKU = re.compile(r"(?:Spot )?(?:Preemptible )?(?P<label>.+?) (?:Instance )?(?P<part>Core|Ram) running in [^()]+", re.IGNORECASE)
_LABEL_WORDS = {"AMD", "INTEL", "ARM", "PREDEFINED", "MEMORY-OPTIMIZED", "CUSTOM"}  # what may follow the family
_LABEL_FAMILIES = {"COMPUTE OPTIMIZED": "C2", "MEMORY-OPTIMIZED": "M1"}  # families whose SKUs do not name them
_CUSTOM = re.compile(r"(?:(?P<family>[a-z][a-z0-9]*)-)?custom-(?P<vcpus>\d+)-(?P<memory_mb>\d+)(?P<extended>-ext)?")


@dataclass(frozen=True)
class MachineShape:
    """What GCE bills a machine type by."""

    vcpus: float
    memory_gib: float
    gpus: Mapping[str, int] = field(default_factory=dict)  # the GPUs it comes with, by GCE accelerator type
    shared_core: bool = False


@dataclass(frozen=True)
class Rate:
    """One SKU: $ per vCPU-hour, GiB-hour or GPU-hour of `what` (a family key or a GPU model) in `market`."""

    part: str  # core, ram or gpu
    what: str
    market: str
    regions: frozenset[str]
    dollars: float
    sku: str


GCE_ZONES = ZoneNames(
    "GCP", "region", re.compile(r"(?P<region>[a-z]+-[a-z]+\d+)-[a-z]"), "a GCE zone such as us-central1-a", (REGION_ENV_VAR,),
)
region_of = GCE_ZONES.region_of


def family_key(instance_type: str) -> str:
    """The key a type's core and memory rates are filed under: its family, and whether it is custom ("N2", "N2
    custom"; "custom-8-30720" is N1's)."""
    custom = _CUSTOM.fullmatch(instance_type)
    if custom is not None:
        return f"{(custom['family'] or 'n1').upper()} custom"
    return instance_type.split("-", 1)[0].upper()


def gpu_key(model: str) -> str:
    """A GPU model as the SKUs and accelerator types both name it, words in any order: "H100 80GB Mega" and
    nvidia-h100-mega-80gb are both "80GB H100 MEGA"; "Tesla" is left out (nvidia-tesla-a100, "Tesla A100")."""
    words = re.split(r"[\s-]+", model.upper().removeprefix("NVIDIA-"))
    return " ".join(sorted(word for word in words if word and word != "TESLA"))


def sku_rate(sku: Any) -> Rate | None:
    """The rate a Compute Engine SKU (billing_v1.Sku) sets for a machine's part, or None for any other SKU
    (commitments, licences, disks, sole tenancy, shared cores, other units or currencies)."""
    market = _MARKETS.get(sku.category.usage_type)
    if market is None or sku.category.resource_family != "Compute" or not sku.pricing_info:
        return None
    part_what = _part_of(sku.description)
    if part_what is None:
        return None
    part, what = part_what
    expression = sku.pricing_info[-1].pricing_expression
    tiers = [tier for tier in expression.tiered_rates if tier.start_usage_amount == 0]
    if expression.usage_unit != _UNITS[part] or not tiers or tiers[0].unit_price.currency_code not in ("", "USD"):
        return None
    money = tiers[0].unit_price
    return Rate(part, what, market, frozenset(sku.service_regions), money.units + money.nanos / 1e9, sku.sku_id)


def _part_of(description: str) -> tuple[str, str] | None:
    gpu = _GPU_SKU.fullmatch(description)
    if gpu is not None:
        return "gpu", gpu_key(gpu["model"])
    found = _PART_SKU.fullmatch(description)
    if found is None:
        return None
    label = found["label"].upper()
    words = label.split()
    if label in _LABEL_FAMILIES:
        family, rest = _LABEL_FAMILIES[label], []
    elif words[0] == "CUSTOM":  # N1's custom types: "Custom Instance Core running in ..."
        family, rest = "N1", words
    else:
        family, rest = words[0], words[1:]
    if not re.fullmatch(r"[A-Z][A-Z0-9]*", family) or not set(rest) <= _LABEL_WORDS:
        return None
    return found["part"].lower(), f"{family} custom" if "CUSTOM" in rest else family


class RateIndex:
    """The rates of a listing of SKUs, found by region, part, what and market."""

    def __init__(self, rates: Iterable[Rate]) -> None:
        self._rates: dict[tuple[str, str, str, str], list[Rate]] = defaultdict(list)
        for rate in rates:
            for region in rate.regions:
                self._rates[region, rate.part, rate.what, rate.market].append(rate)

    def dollars(self, region: str, part: str, what: str, market: str) -> float:
        """$ per unit-hour; UnknownPrice naming the part when no SKU, or SKUs that disagree, price it there. A SKU of
        the region alone is preferred to one that covers several."""
        found = self._rates.get((region, part, what, market), [])
        if not found:
            raise UnknownPrice(f"GCP's billing catalog has no {market} price for {what} {_PART_NAMES[part]} in {region}")
        narrowest = min(len(rate.regions) for rate in found)
        prices = {rate.dollars: rate.sku for rate in found if len(rate.regions) == narrowest}
        if len(prices) > 1:
            raise UnknownPrice(
                f"GCP's billing catalog prices {what} {_PART_NAMES[part]} in {region} ({market}) twice: SKUs "
                f"{', '.join(sorted(prices.values()))}"
            )
        return next(iter(prices))


_PART_NAMES = {"core": "vCPUs", "ram": "memory", "gpu": "GPUs"}


def machine_dollars(
    rates: RateIndex, instance_type: str, shape: MachineShape, attached: Mapping[str, int], region: str, market: str,
) -> float:
    """$/h of a machine type with the GPUs attached to it (by GCE accelerator type; those it comes with are not
    counted twice)."""
    if shape.shared_core:
        raise UnknownPrice(f"{instance_type} is a shared-core machine type, which GCP's billing catalog prices apart")
    family = family_key(instance_type)
    gpus = {**attached, **shape.gpus}
    return (
        shape.vcpus * rates.dollars(region, "core", family, market)
        + shape.memory_gib * rates.dollars(region, "ram", family, market)
        + sum(count * rates.dollars(region, "gpu", gpu_key(gpu), market) for gpu, count in gpus.items())
    )


def custom_shape(instance_type: str) -> MachineShape | None:
    """A custom machine type's shape from its name (vCPUs, memory in MB); None for a predefined type."""
    found = _CUSTOM.fullmatch(instance_type)
    if found is None:
        return None
    if found["extended"]:
        raise UnknownPrice(f"{instance_type} has extended memory, which GCP's billing catalog prices apart")
    return MachineShape(vcpus=int(found["vcpus"]), memory_gib=int(found["memory_mb"]) / 1024)


class GcpListPrices:
    """Compute Engine's list prices: SKUs from the Cloud Billing Catalog, machine shapes from Compute Engine.

    Both are asked with google-auth's credentials (or `credentials`), machine types in the project of
    SPOTRUN_GCP_PROJECT or of the credentials (or `project`); `billing_options` and `compute_options` are the
    clients' client_options (tests point them at local fakes). Answers are kept for `ttl`; a failure is
    UnknownPrice, saying why, and is answered again without asking for `retry_after`: a controller that cannot
    read them (no credentials, an outage) asks once in a while, not at every placement."""

    def __init__(
        self, *, credentials: Any = None, project: str | None = None,
        billing_options: Mapping[str, Any] | None = None, compute_options: Mapping[str, Any] | None = None,
        ttl: float = PRICES_LAST, retry_after: float = LIST_RETRY_AFTER, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._credentials = credentials
        self._project = project
        self._billing_options = dict(billing_options or {})
        self._compute_options = dict(compute_options or {})
        self._rates: TtlCache[RateIndex] = TtlCache(ttl, clock, failure_seconds=retry_after)
        self._shapes: TtlCache[MachineShape] = TtlCache(ttl, clock, failure_seconds=retry_after)

    def prices(
        self, instance_type: str, market: str, zone: str | None, accelerators: Mapping[str, int] | None = None,
    ) -> tuple[float, float]:
        """($/h in `market`, $/h on-demand) of the machine type and attached GPUs in the zone's region."""
        region = region_of(zone)
        attached = {gcp_accelerator(name): count for name, count in (accelerators or {}).items()}
        shape = custom_shape(instance_type) or self._shapes.get(instance_type, lambda: self._read_shape(instance_type))
        rates = self._rates.get("skus", self._read_rates)
        on_demand = machine_dollars(rates, instance_type, shape, attached, region, "on-demand")
        if market == "on-demand":
            return on_demand, on_demand
        return machine_dollars(rates, instance_type, shape, attached, region, market), on_demand

    def _read_rates(self) -> RateIndex:
        try:
            from google.cloud import billing_v1  # here: the CLI imports this module and seldom prices on GCP

            client = billing_v1.CloudCatalogClient(
                credentials=self._credentials, client_options=self._billing_options, transport="rest",
            )
            skus = client.list_skus(request=billing_v1.ListSkusRequest(parent=COMPUTE_ENGINE, currency_code="USD"))
            return RateIndex(rate for sku in skus if (rate := sku_rate(sku)) is not None)
        except Exception as error:  # no credentials, no permission, an outage: the job is refused, saying why
            raise UnknownPrice(f"GCP's billing catalog could not be read ({error})") from None

    def _read_shape(self, instance_type: str) -> MachineShape:
        try:
            import google.auth
            from google.cloud import compute_v1

            from spotrun.providers.gcp.settings import GcpSettings

            project = self._project or GcpSettings.from_env().project or google.auth.default()[1]
            client = compute_v1.MachineTypesClient(
                credentials=self._credentials, client_options=self._compute_options, transport="rest",
            )
            return machine_shape(client, project, instance_type)
        except UnknownPrice:
            raise
        except Exception as error:
            raise UnknownPrice(f"GCE's machine type {instance_type} could not be read ({error})") from None


def machine_shape(client: Any, project: str | None, instance_type: str) -> MachineShape:
    """A predefined machine type's shape, as a compute_v1.MachineTypesClient lists it in any zone of the project."""
    from google.cloud import compute_v1

    if not project:
        raise UnknownPrice(f"no GCP project to read machine type {instance_type} in: set SPOTRUN_GCP_PROJECT")
    request = compute_v1.AggregatedListMachineTypesRequest(project=project, filter=f'name = "{instance_type}"')
    for _, scoped in client.aggregated_list(request=request):
        for machine in scoped.machine_types:
            if machine.name == instance_type:
                return MachineShape(
                    vcpus=machine.guest_cpus, memory_gib=machine.memory_mb / 1024,
                    gpus={gpu.guest_accelerator_type: gpu.guest_accelerator_count for gpu in machine.accelerators},
                    shared_core=machine.is_shared_cpu,
                )
    raise UnknownPrice(f"GCE offers no machine type {instance_type} in project {project}")


LIST_PRICES = GcpListPrices()  # one cache per process: every job priced on GCP shares it


def gcp_prices(
    instance_type: str, market: str, zone: str | None, accelerators: Mapping[str, int] | None = None,
) -> tuple[float, float]:
    """($/h in `market`, $/h on-demand) of a GCE machine type with its attached GPUs (`catalog_prices`' shape)."""
    return LIST_PRICES.prices(instance_type, market, zone, accelerators)
