"""Resource SKU entries as ARM lists them (GET .../providers/Microsoft.Compute/skus)."""

from __future__ import annotations

from typing import Any


def vm_sku(
    name: str,
    location: str,
    zones: list[str],
    *,
    restricted_zones: list[str] | None = None,
    restricted_location: bool = False,
) -> dict[str, Any]:
    """A virtualMachines SKU offered in `location` and `zones`, with the subscription's restrictions, if any."""
    restrictions: list[dict[str, Any]] = []
    if restricted_zones:
        restrictions.append({
            "type": "Zone",
            "values": [location],
            "restrictionInfo": {"locations": [location], "zones": restricted_zones},
            "reasonCode": "NotAvailableForSubscription",
        })
    if restricted_location:
        restrictions.append({
            "type": "Location",
            "values": [location],
            "restrictionInfo": {"locations": [location]},
            "reasonCode": "NotAvailableForSubscription",
        })
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "locations": [location],
        "locationInfo": [{"location": location, "zones": zones, "zoneDetails": []}],
        "capabilities": [{"name": "LowPriorityCapable", "value": "True"}],
        "restrictions": restrictions,
    }


def disk_sku(name: str, location: str) -> dict[str, Any]:
    """A SKU of another resource type, which the zone lookup must skip."""
    return {"resourceType": "disks", "name": name, "locations": [location], "locationInfo": [{"location": location, "zones": ["1"]}], "restrictions": []}
