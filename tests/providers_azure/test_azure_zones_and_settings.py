"""Zones from the Resource SKUs list, and the provider's settings (arguments, SPOTRUN_AZURE_* variables)."""

from __future__ import annotations

import pytest
from fakes_azure import disk_sku, vm_sku

from spotrun.providers.azure import AzureApiError, AzureProvider, AzureSettings
from spotrun.providers.base import Provider

SUBSCRIPTION = "8f0c2d4e-1a3b-4c5d-9e7f-0123456789ab"
SUBNET = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq7 me@laptop"


def test_zones_are_the_locations_zones_that_offer_the_size(provider, arm) -> None:
    arm.skus = [
        disk_sku("Premium_LRS", "eastus"),
        vm_sku("Standard_D2s_v5", "eastus", ["1"]),
        vm_sku("Standard_NC6s_v3", "westus2", ["1", "2", "3"]),
        vm_sku("Standard_NC6s_v3", "eastus", ["3", "1", "2"], restricted_zones=["1"]),
    ]

    assert provider.zones("Standard_NC6s_v3") == ["eastus-2", "eastus-3"]
    assert provider.zones("standard_nc6s_v3") == ["eastus-2", "eastus-3"]  # Azure size names are case-insensitive
    first_page, second_page = [r for r in arm.requests if r.path.endswith("/skus")]  # cached after one listing
    assert first_page.query["$filter"] == second_page.query["$filter"] == ["location eq 'eastus'"]


def test_zones_are_cached(provider, arm) -> None:
    provider.zones("Standard_NC6s_v3")
    provider.zones("Standard_NC6s_v3")

    assert arm.count("GET", "/providers/Microsoft.Compute/skus") == 1


def test_zones_follow_the_sku_listing_across_pages(provider, arm) -> None:
    arm.skus = [vm_sku(f"Standard_D{n}s_v5", "eastus", ["1"]) for n in range(5)] + [vm_sku("Standard_NC6s_v3", "eastus", ["2"])]

    assert provider.zones("Standard_NC6s_v3") == ["eastus-2"]


def test_a_size_restricted_in_the_location_has_no_zones(provider, arm) -> None:
    arm.skus = [vm_sku("Standard_NC6s_v3", "eastus", ["1", "2"], restricted_location=True)]

    assert provider.zones("Standard_NC6s_v3") == []


def test_a_size_without_zones_is_placed_in_the_location(provider, arm) -> None:
    arm.skus = [vm_sku("Standard_NC6s_v3", "eastus", [])]

    assert provider.zones("Standard_NC6s_v3") == ["eastus"]


def test_an_unknown_size_has_no_zones(provider) -> None:
    assert provider.zones("Standard_Imaginary_v9") == []


def test_a_failed_sku_listing_raises(provider, arm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arm, "_skus_get", lambda request, **_: (403, {}, {"error": {"code": "AuthorizationFailed", "message": "no"}}))

    with pytest.raises(AzureApiError, match="AuthorizationFailed"):
        provider.zones("Standard_NC6s_v3")


def test_settings_come_from_spotrun_azure_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {
        "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
        "SPOTRUN_AZURE_RESOURCE_GROUP": "training",
        "SPOTRUN_AZURE_LOCATION": "westeurope",
        "SPOTRUN_AZURE_SUBNET_ID": SUBNET,
        "SPOTRUN_AZURE_SSH_PUBLIC_KEY": KEY,
        "SPOTRUN_AZURE_EVICTION_POLICY": "Deallocate",
        "SPOTRUN_AZURE_PUBLIC_IP": "true",
        "SPOTRUN_AZURE_LAUNCH_WAIT": "45",
        "SPOTRUN_AZURE_OS_DISK_SIZE_GB": "200",
    }

    settings = AzureSettings.from_env(environ, location="northeurope")

    assert (settings.subscription_id, settings.resource_group, settings.location) == (SUBSCRIPTION, "training", "northeurope")
    assert (settings.eviction_policy, settings.public_ip, settings.launch_wait, settings.os_disk_size_gb) == ("Deallocate", True, 45.0, 200)


def test_missing_settings_are_named() -> None:
    with pytest.raises(ValueError, match=r"resource_group \(SPOTRUN_AZURE_RESOURCE_GROUP\).*subnet_id"):
        AzureSettings.from_env({"AZURE_SUBSCRIPTION_ID": SUBSCRIPTION, "SPOTRUN_AZURE_LOCATION": "eastus"})


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ({"subscription_id": "not-a-uuid"}, "subscription_id must be a subscription id"),
        ({"location": "East US"}, "location must be a location name"),
        ({"subnet_id": "subnet-123"}, "subnet_id must be a subnet resource id"),
        ({"ssh_public_key": "hunter2"}, "ssh_public_key must be an OpenSSH public key"),
        ({"image": "ubuntu"}, "image must be a URN"),
        ({"admin_username": "root"}, "admin_username"),
        ({"eviction_policy": "Stop"}, "eviction_policy must be Delete or Deallocate"),
        ({"launch_wait": -1.0}, "launch_wait"),
        ({"identity_id": "my-identity"}, "identity_id"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(override, problem) -> None:
    values = {
        "subscription_id": SUBSCRIPTION, "resource_group": "rg", "location": "eastus", "subnet_id": SUBNET,
        "ssh_public_key": KEY, **override,
    }
    with pytest.raises(ValueError, match=problem):
        AzureSettings(**values)


def test_bad_variables_are_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="SPOTRUN_AZURE_PUBLIC_IP must be true or false"):
        AzureSettings.from_env({"SPOTRUN_AZURE_PUBLIC_IP": "maybe"})
    with pytest.raises(ValueError, match="SPOTRUN_AZURE_LAUNCH_WAIT must be a number"):
        AzureSettings.from_env({"SPOTRUN_AZURE_LAUNCH_WAIT": "soon"})


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown Azure provider option"):
        AzureProvider(region="eastus")


def test_without_a_credential_the_provider_uses_azure_identitys_default_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.identity import DefaultAzureCredential

    provider = AzureProvider(
        subscription_id=SUBSCRIPTION, resource_group="rg", location="eastus", subnet_id=SUBNET, ssh_public_key=KEY,
    )

    assert isinstance(provider.compute._config.credential, DefaultAzureCredential)
    assert isinstance(provider, Provider) and provider.name == "azure"


def test_spot_is_quoted_in_every_zone_at_the_locations_list_price(provider, arm, monkeypatch) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fakes_azure import FakeRetailPrices, vm_meter

    from spotrun.costs.market_prices import MarketPrices

    arm.skus = [vm_sku("Standard_NC6s_v3", "eastus", ["1", "2"]), vm_sku("Standard_D2s_v5", "eastus", ["1"])]
    meters = [vm_meter("Standard_NC6s_v3", "eastus", 3.06), vm_meter("Standard_NC6s_v3", "eastus", 0.3157, spot=True),
              vm_meter("Standard_D2s_v5", "eastus", 0.096)]
    with FakeRetailPrices(meters) as retail:
        monkeypatch.setenv("SPOTRUN_AZURE_PRICES_URL", retail.url)
        assert provider.spot_prices("Standard_NC6s_v3") == {"eastus-1": 0.3157, "eastus-2": 0.3157}
        assert provider.spot_prices("Standard_D2s_v5") == {}  # no Spot meter there
        prices = MarketPrices(lambda cloud: provider)
        assert prices("azure", "Standard_NC6s_v3", "spot", "eastus-2") == (0.3157, 3.06)
