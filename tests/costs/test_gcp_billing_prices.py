"""Compute Engine's list prices from the Cloud Billing Catalog (`costs/gcp_billing.py`), through google-cloud-billing
and google-cloud-compute against fakes that speak both APIs: a machine type priced by its parts (vCPUs, memory,
GPUs it comes with or has attached) at its family's rates in the zone's region, Spot at the Preemptible SKUs'
rates, the SKUs that price something else left out, and every way of not getting a price an UnknownPrice that says
why (a job is then refused naming resources.prices)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes_gcp
from fakes_gcp import FakeCloud, FakeCompute, loopback_only  # noqa: E402
from fakes_gcp.billing_catalog import FakeBillingCatalog, compute_sku  # noqa: E402

from spotrun.control import jobs  # noqa: E402
from spotrun.costs import gcp_billing  # noqa: E402
from spotrun.costs.catalog import UnknownPrice  # noqa: E402
from spotrun.costs.gcp_billing import GcpListPrices, family_key, gpu_key, region_of, sku_rate  # noqa: E402
from spotrun.costs.market_prices import catalog_prices  # noqa: E402
from spotrun.spec import SpecError, parse_spec  # noqa: E402

AMERICAS = ["us-central1", "us-east1", "us-south1"]
N2_CORE, N2_RAM, N2_SPOT_CORE, N2_SPOT_RAM = 0.031611, 0.004237, 0.00765, 0.001025
G2_CORE, G2_RAM, G2_SPOT_CORE, G2_SPOT_RAM = 0.024988, 0.002927, 0.00999, 0.00117
L4, L4_SPOT, T4, T4_SPOT = 0.56, 0.224, 0.35, 0.14
N1_CORE, N1_RAM = 0.031611, 0.004237
N1_CORE_NL, N1_RAM_NL, V100_NL = 0.034773, 0.004661, 2.55
SKUS = [
    compute_sku("N2 Instance Core running in Americas", N2_CORE, AMERICAS),
    compute_sku("N2 Instance Ram running in Americas", N2_RAM, AMERICAS, unit="GiBy.h", resource_group="RAM"),
    compute_sku("Spot Preemptible N2 Instance Core running in Americas", N2_SPOT_CORE, AMERICAS, usage_type="Preemptible"),
    compute_sku("Spot Preemptible N2 Instance Ram running in Americas", N2_SPOT_RAM, AMERICAS, usage_type="Preemptible",
                unit="GiBy.h"),
    compute_sku("N2 Instance Core running in Dallas", 0.0373, ["us-south1"]),  # the region's own SKU wins
    compute_sku("N2 Instance Core running in Netherlands", 0.0348, ["europe-west4"]),
    compute_sku("N2 Instance Ram running in Netherlands", 0.00466, ["europe-west4"], unit="GiBy.h"),
    compute_sku("N2 Custom Instance Core running in Americas", 0.033191, AMERICAS),
    compute_sku("N2 Custom Instance Ram running in Americas", 0.004449, AMERICAS, unit="GiBy.h"),
    compute_sku("Custom Instance Core running in Americas", 0.033174, AMERICAS),  # N1's custom types
    compute_sku("Custom Instance Ram running in Americas", 0.004446, AMERICAS, unit="GiBy.h"),
    compute_sku("N1 Predefined Instance Core running in Americas", N1_CORE, AMERICAS),
    compute_sku("N1 Predefined Instance Ram running in Americas", N1_RAM, AMERICAS, unit="GiBy.h"),
    compute_sku("G2 Instance Core running in Americas", G2_CORE, AMERICAS),
    compute_sku("G2 Instance Ram running in Americas", G2_RAM, AMERICAS, unit="GiBy.h"),
    compute_sku("Spot Preemptible G2 Instance Core running in Americas", G2_SPOT_CORE, AMERICAS, usage_type="Preemptible"),
    compute_sku("Spot Preemptible G2 Instance Ram running in Americas", G2_SPOT_RAM, AMERICAS, usage_type="Preemptible",
                unit="GiBy.h"),
    compute_sku("Nvidia L4 GPU running in Americas", L4, AMERICAS, resource_group="GPU"),
    compute_sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas", L4_SPOT, AMERICAS,
                usage_type="Preemptible", resource_group="GPU"),
    compute_sku("Nvidia Tesla T4 GPU running in Americas", T4, AMERICAS, resource_group="GPU"),
    compute_sku("Spot Preemptible Nvidia Tesla T4 GPU running in Americas", T4_SPOT, AMERICAS, usage_type="Preemptible",
                resource_group="GPU"),
    # what prices something else
    compute_sku("Commitment v1: N2 Cpu in Americas for 1 Year", 0.019915, AMERICAS, usage_type="Commit1Yr"),
    compute_sku("N2 Sole Tenancy Instance Core running in Americas", 0.0379, AMERICAS),
    compute_sku("N2 Custom Extended Instance Ram running in Americas", 0.0095, AMERICAS, unit="GiBy.h"),
    compute_sku("Nvidia Tesla T4 Virtual Workstation GPU running in Americas", 0.55, AMERICAS, resource_group="GPU"),
    compute_sku("N2 Instance Core running in Americas", 9.99, AMERICAS, unit="GiBy.mo"),
    compute_sku("G2 Instance Core running in Americas (DWS Defined Duration)", 0.0125, AMERICAS),
    # a type and GPU spotrun's catalog lists (at us-central1's prices), in another region
    compute_sku("N1 Predefined Instance Core running in Netherlands", N1_CORE_NL, ["europe-west4"]),
    compute_sku("N1 Predefined Instance Ram running in Netherlands", N1_RAM_NL, ["europe-west4"], unit="GiBy.h"),
    compute_sku("Nvidia Tesla V100 GPU running in Netherlands", V100_NL, ["europe-west4"], resource_group="GPU"),
]


@pytest.fixture(autouse=True)
def no_network():
    with loopback_only() as attempts:
        yield
    assert not attempts, f"the test tried to reach hosts beyond loopback: {attempts}"


@pytest.fixture
def compute():
    cloud = FakeCloud(project="spotrun-test")
    cloud.machine_types["us-central1-a"] |= {"n2-standard-8", "g2-standard-8", "a2-highgpu-1g"}
    with FakeCompute(cloud) as fake:
        yield fake


@pytest.fixture
def billing():
    with FakeBillingCatalog(SKUS, page_size=7) as fake:
        yield fake


def list_prices(compute, billing, **options) -> GcpListPrices:
    return GcpListPrices(
        credentials=AnonymousCredentials(), project="spotrun-test", billing_options={"api_endpoint": billing.url},
        compute_options={"api_endpoint": compute.url}, **options,
    )


@pytest.fixture
def prices(compute, billing, monkeypatch) -> GcpListPrices:
    """The process's price list pointed at the fakes, as `catalog_prices` (and so the controller) reads it."""
    installed = list_prices(compute, billing)
    monkeypatch.setattr(gcp_billing, "LIST_PRICES", installed)
    return installed


def test_a_machine_type_is_its_vcpus_and_memory_at_its_familys_rates_in_the_zones_region(prices, compute, billing):
    on_demand = 8 * N2_CORE + 32 * N2_RAM
    assert catalog_prices("gcp", "n2-standard-8", "on-demand", "us-central1-a") == pytest.approx((on_demand, on_demand))
    spot, listed = catalog_prices("gcp", "n2-standard-8", "spot", "us-central1-b")
    assert (spot, listed) == pytest.approx((8 * N2_SPOT_CORE + 32 * N2_SPOT_RAM, on_demand))
    assert catalog_prices("gcp", "n2-standard-8", "on-demand", "europe-west4-a")[0] == pytest.approx(
        8 * 0.0348 + 32 * 0.00466)
    assert catalog_prices("gcp", "n2-standard-8", "on-demand", "us-south1-a")[0] == pytest.approx(8 * 0.0373 + 32 * N2_RAM)
    assert billing.requests[0]["currencyCode"] == ["USD"]
    shape_asks = [r for r in compute.cloud.requests if "machineTypes" in r.path]
    assert len(shape_asks) == 1 and 'name = "n2-standard-8"' in shape_asks[0].query.get("filter", "")


def test_the_gpus_a_type_comes_with_are_priced_once_and_attached_ones_on_top(prices):
    g2 = catalog_prices("gcp", "g2-standard-8", "spot", "us-central1-a", {"L4": 1})
    assert g2 == pytest.approx((8 * G2_SPOT_CORE + 32 * G2_SPOT_RAM + L4_SPOT, 8 * G2_CORE + 32 * G2_RAM + L4))
    assert catalog_prices("gcp", "g2-standard-8", "spot", "us-central1-a") == g2
    # a type the catalog lists, with a GPU it does not: the whole machine from the billing catalog
    n1 = catalog_prices("gcp", "n1-standard-8", "on-demand", "us-central1-a", {"T4": 2})
    assert n1[0] == pytest.approx(8 * N1_CORE + 30 * N1_RAM + 2 * T4)
    # a type and GPU the catalog lists, in a region the billing catalog prices: its prices, not us-central1's
    n1_netherlands = 8 * N1_CORE_NL + 30 * N1_RAM_NL + V100_NL
    assert catalog_prices("gcp", "n1-standard-8", "on-demand", "europe-west4-a", {"V100": 1}) == pytest.approx(
        (n1_netherlands, n1_netherlands))
    # where the billing catalog has no V100 (its Americas SKU is not listed here), the catalog's prices stand
    assert catalog_prices("gcp", "n1-standard-8", "on-demand", "us-central1-a", {"V100": 1}) == (0.38 + 2.48, 0.38 + 2.48)


def test_a_custom_type_is_priced_from_its_name_at_the_custom_rates(prices, compute):
    assert catalog_prices("gcp", "n2-custom-8-16384", "on-demand", "us-central1-a")[0] == pytest.approx(
        8 * 0.033191 + 16 * 0.004449)
    assert catalog_prices("gcp", "custom-4-15360", "on-demand", "us-east1-b")[0] == pytest.approx(
        4 * 0.033174 + 15 * 0.004446)
    assert not [r for r in compute.cloud.requests if "machineTypes" in r.path]


def test_every_page_is_read_once_an_hour(compute, billing):
    now = [0.0]
    prices = list_prices(compute, billing, clock=lambda: now[0])
    first = prices.prices("n2-standard-8", "on-demand", "us-central1-a")
    assert len(billing.requests) == -(-len(SKUS) // 7)  # every page, once
    billing.skus[0] = compute_sku("N2 Instance Core running in Americas", 0.04, AMERICAS)
    assert prices.prices("n2-standard-8", "on-demand", "us-central1-a") == first
    assert len(billing.requests) == -(-len(SKUS) // 7)
    now[0] = 3600.0
    assert prices.prices("n2-standard-8", "on-demand", "us-central1-a")[0] == pytest.approx(8 * 0.04 + 32 * N2_RAM)


@pytest.mark.parametrize(("instance_type", "market", "zone", "accelerators", "reason"), [
    ("e2-small", "on-demand", "us-central1-a", None, "e2-small is a shared-core machine type"),
    ("m9-megamem-1", "on-demand", "us-central1-a", None, "GCE offers no machine type m9-megamem-1 in project spotrun-test"),
    ("n2-custom-8-65536-ext", "on-demand", "us-central1-a", None, "extended memory"),
    ("n2-standard-8", "spot", "europe-west4-a", None, "no spot price for N2 vCPUs in europe-west4"),
    ("a2-highgpu-1g", "on-demand", "us-central1-a", None, "no on-demand price for A2 vCPUs in us-central1"),
    ("n2-standard-8", "on-demand", "us-central1-a", {"Z9000": 1}, "unknown accelerator 'Z9000'"),
    ("n1-standard-8", "on-demand", "us-central1-a", {"A100-80GB": 1}, "no on-demand price for 80GB A100 GPUs"),
    ("n2-standard-8", "on-demand", "uscentral1", None, "'uscentral1' is not a GCE zone"),
])
def test_what_cannot_be_priced_says_why(prices, instance_type, market, zone, accelerators, reason):
    with pytest.raises(UnknownPrice, match=reason):
        catalog_prices("gcp", instance_type, market, zone, accelerators)


def test_with_no_zone_the_job_is_priced_in_the_configured_region(prices, monkeypatch):
    with pytest.raises(UnknownPrice, match="set SPOTRUN_GCP_REGION"):
        catalog_prices("gcp", "n2-standard-8", "on-demand", None)
    monkeypatch.setenv("SPOTRUN_GCP_REGION", "europe-west4")
    assert catalog_prices("gcp", "n2-standard-8", "on-demand", None)[0] == pytest.approx(8 * 0.0348 + 32 * 0.00466)
    assert region_of("northamerica-northeast1-b") == "northamerica-northeast1"


def test_a_gcp_job_is_priced_without_its_own_prices_or_refused_naming_them(compute, billing, monkeypatch, store):
    now = [0.0]
    monkeypatch.setattr(gcp_billing, "LIST_PRICES", list_prices(compute, billing, retry_after=300, clock=lambda: now[0]))
    monkeypatch.setenv("SPOTRUN_GCP_REGION", "us-central1")
    text = "run: 'true'\nresources: {cloud: gcp, instance_type: g2-standard-8}\n"
    billing.failure = (403, "Permission 'billing.services.skus.list' denied")
    with pytest.raises(SpecError) as refused:
        jobs.submit(store, parse_spec(text), 0.0, source="job.yaml")
    [problem] = refused.value.problems
    assert problem.field == "resources.instance_type" and "resources.prices" in problem.message
    assert "billing catalog could not be read" in problem.message and "403" in problem.message
    billing.failure = None
    asked = len(billing.requests)
    # the failure stands for a while without asking again: not an API call at every placement
    with pytest.raises(SpecError, match="403"):
        jobs.submit(store, parse_spec(text), 0.0, source="job.yaml")
    assert len(billing.requests) == asked
    now[0] = 301.0
    assert jobs.submit(store, parse_spec(text), 0.0, source="job.yaml") > 0


def test_only_the_skus_of_a_machines_parts_are_read_as_rates():
    from google.cloud import billing_v1

    def rate(sku: dict) -> object:
        return sku_rate(billing_v1.Sku.from_json(json.dumps(sku)))

    kept = [r for r in map(rate, SKUS) if r is not None]
    assert len(kept) == len(SKUS) - 5  # the commitment, sole tenancy, extended memory, monthly and DWS SKUs
    assert rate(SKUS[24]).what == "T4 VIRTUAL WORKSTATION" != rate(SKUS[19]).what  # another product than the T4
    spot_l4 = rate(SKUS[18])
    assert (spot_l4.part, spot_l4.what, spot_l4.market, spot_l4.dollars) == ("gpu", "L4", "spot", pytest.approx(L4_SPOT))
    assert rate(SKUS[9]).what == "N1 custom" and rate(SKUS[7]).what == "N2 custom"
    assert rate(compute_sku("Spot Preemptible Compute optimized Core running in Japan", 0.0063, ["asia-northeast1"],
                            usage_type="Preemptible")).what == "C2"
    assert rate(compute_sku("N2D AMD Instance Ram running in Japan", 0.0045, ["asia-northeast1"], unit="GiBy.h")).what == "N2D"
    assert rate(compute_sku("N2 Instance Core running in Americas", 0.03, AMERICAS, currency="EUR")) is None


def test_gpu_and_family_names_meet_as_the_skus_write_them():
    assert gpu_key("nvidia-h100-mega-80gb") == gpu_key("H100 80GB Mega")
    assert gpu_key("nvidia-tesla-a100") == gpu_key("Tesla A100") != gpu_key("A100 80GB") == gpu_key("nvidia-a100-80gb")
    assert [family_key(t) for t in ("n2d-standard-16", "custom-2-7680", "e2-custom-4-8192", "a3-highgpu-8g")] == [
        "N2D", "N1 custom", "E2 custom", "A3"]
