"""Which zones of a location offer a VM size to this subscription, from the Resource SKUs list."""

from __future__ import annotations

from collections.abc import Iterable

from azure.mgmt.compute.models import ResourceSku

from spotrun.providers.azure.instances import text, zone_name

VM_RESOURCE_TYPE = "virtualMachines"


def location_filter(location: str) -> str:
    """The $filter the SKU list supports (by location only)."""
    return f"location eq '{location}'"


def available_zones(skus: Iterable[ResourceSku], instance_type: str, location: str) -> list[str]:
    """spotrun zone names ("<location>-<n>", or the bare location where the size has no zones) that offer
    `instance_type`, less those the subscription is restricted from."""
    location = location.lower()
    for sku in skus:
        if text(sku.resource_type) != VM_RESOURCE_TYPE or text(sku.name).lower() != instance_type.lower():
            continue
        infos = [info for info in sku.location_info or [] if text(info.location).lower() == location]
        if not infos:
            continue
        if _restricted_in_location(sku, location):
            return []
        offered = {zone for info in infos for zone in info.zones or []}
        if not offered:
            return [location]
        usable = offered - _restricted_zones(sku, location)
        return sorted((zone_name(location, [zone]) for zone in usable), key=_zone_order)
    return []


def _restricted_in_location(sku: ResourceSku, location: str) -> bool:
    return any(
        text(restriction.type) == "Location" and location in {value.lower() for value in restriction.values_property or []}
        for restriction in sku.restrictions or []
    )


def _restricted_zones(sku: ResourceSku, location: str) -> set[str]:
    zones: set[str] = set()
    for restriction in sku.restrictions or []:
        info = restriction.restriction_info
        if text(restriction.type) != "Zone" or info is None:
            continue
        if info.locations and location not in {value.lower() for value in info.locations}:
            continue
        zones.update(info.zones or [])
    return zones


def _zone_order(name: str) -> tuple[int, str]:
    suffix = name.rsplit("-", 1)[-1]
    return (int(suffix), name) if suffix.isdigit() else (0, name)
