"""Azure VMs as a provider: Spot and regular VMs through azure-mgmt-compute, idempotent on the client token.

Idempotency: a VM's name is derived from the launch's client token, and a launch first GETs that name, so a
repeated launch returns the VM the first one created. Allocation failures (no capacity) arrive in the
long-running create operation, after Azure accepted the PUT: `launch` waits up to `launch_wait` seconds for it,
and later a repeated launch or `describe` reads them off the failed VM.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError
from azure.core.polling import LROPoller
from azure.identity import DefaultAzureCredential
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine

from spotrun.costs.azure_retail import RETAIL_PRICES
from spotrun.providers.azure.errors import CREATE_VM, AzureApiError, error_code, error_message, translate, vm_gone
from spotrun.providers.azure.instances import (
    TOKEN_TAG,
    check_vm_name,
    instance_info,
    unknown_info,
    vm_name,
    zones_field,
)
from spotrun.providers.azure.settings import AzureSettings
from spotrun.providers.azure.skus import available_zones, location_filter
from spotrun.providers.azure.vm_body import vm_body
from spotrun.providers.base import (
    InstanceInfo,
    LaunchInvalid,
    LaunchRequest,
    NoCapacity,
    PriceTooLow,
    ProviderError,
    QuotaExceeded,
    check_token_and_market,
)
from spotrun.providers.zone_cache import ZoneCache

log = logging.getLogger(__name__)

CLOUD = "azure"
MAX_CLIENT_TOKEN_LENGTH = 256  # Azure's limit on a tag value
_REFUSALS = {
    "no_capacity": NoCapacity, "price_too_low": PriceTooLow, "quota_exceeded": QuotaExceeded, "launch_invalid": LaunchInvalid,
}


class AzureProvider:
    """Azure VMs in one resource group and location, described by `AzureSettings` (arguments here override
    SPOTRUN_AZURE_* variables).

    `credential` defaults to azure-identity's DefaultAzureCredential; `client_options` go to
    ComputeManagementClient (tests give a transport that reaches a local fake ARM).
    """

    name = CLOUD

    def __init__(
        self,
        settings: AzureSettings | None = None,
        *,
        credential: TokenCredential | None = None,
        client_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if settings is not None and options:
            raise TypeError("pass either settings or individual options, not both")
        self.settings = settings or AzureSettings.from_env(**options)
        self.compute = ComputeManagementClient(
            credential or DefaultAzureCredential(),
            self.settings.subscription_id,
            polling_interval=self.settings.poll_interval,
            **dict(client_options or {}),
        )
        # What this process saw of its VMs, to describe one that has vanished (Azure forgets a deleted VM).
        self._last_seen: dict[str, InstanceInfo] = {}
        self._deleted_here: set[str] = set()
        self._zone_cache = ZoneCache()

    @property
    def resource_group(self) -> str:
        return self.settings.resource_group

    # -- where -------------------------------------------------------------------------------------------

    def zones(self, instance_type: str, accelerators: Mapping[str, int] | None = None) -> list[str]:
        """Zones ("<location>-<n>") of the location that offer `instance_type` to this subscription."""
        return self._zone_cache.zones(instance_type.lower(), lambda: self._list_zones(instance_type))  # case-insensitive

    def spot_prices(self, instance_type: str) -> dict[str, float]:
        """Spot's $/h in each zone that offers `instance_type`: Azure's list price for the location, one for all its
        zones (`costs.azure_retail`); none where the list has no Spot price. Asked through `MarketPrices`, whose
        quotes a running attempt's price follows (`control.repricing`)."""
        spot = RETAIL_PRICES.vm_prices(self.settings.location, instance_type).spot
        return {} if spot is None else dict.fromkeys(self.zones(instance_type), spot)

    def _list_zones(self, instance_type: str) -> list[str]:
        with _arm("Microsoft.Compute/skus/read"):
            skus = self.compute.resource_skus.list(filter=location_filter(self.settings.location))
            return available_zones(skus, instance_type, self.settings.location)

    # -- launch ------------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        _validate(request, self.settings.location)
        name = vm_name(request.client_token)
        body = vm_body(request, name, self.settings)  # bad user data is refused before any call
        existing = self._get(name)
        if existing is not None:
            return self._relaunch(existing, request)
        with _arm(CREATE_VM):
            poller = self.compute.virtual_machines.begin_create_or_update(
                self.resource_group, name, body, polling=self.settings.launch_wait > 0
            )
        log.info(
            "creating VM %s: %s %s in %s (client token %s)",
            name, request.market, request.instance_type, request.zone, request.client_token,
        )
        self._await_allocation(poller, name)
        return self._after_launch(name, request)

    def _relaunch(self, existing: InstanceInfo, request: LaunchRequest) -> InstanceInfo:
        """A launch whose VM exists: the same VM, or the refusal its failed allocation stands for. A VM being deleted
        is no longer the launch's: its allocation failed and it was discarded by a controller that died before it
        recorded the refusal (Azure's instance view no longer shows the failure once the VM is deleting), or Azure is
        evicting it. Taken, its going would read as an eviction, billed; launched again once it is gone, the launch
        ends as what Azure answers then."""
        if existing.client_token != request.client_token:
            raise ValueError(
                f"VM {existing.instance_id} exists but was launched for client token {existing.client_token!r}, "
                f"not {request.client_token!r}"
            )
        _check_same_request(existing, request)
        self._raise_if_refused(existing)
        if _being_deleted(existing):
            raise AzureApiError(CREATE_VM, "VmBeingDeleted",
                                f"VM {existing.instance_id} of this launch is being deleted; launching again once it is gone")
        return existing

    def _await_allocation(self, poller: LROPoller[VirtualMachine], name: str) -> None:
        """Wait up to launch_wait for the create operation; a failed one raises (a refusal, or AzureApiError)."""
        try:
            poller.wait(self.settings.launch_wait)
        except AzureError as error:
            translated = translate(error, CREATE_VM)
            if isinstance(translated, ProviderError):
                self._discard_failed(name)
            raise translated from error
        if not poller.done():
            log.info("VM %s not allocated within %.0f s; answering pending", name, self.settings.launch_wait)

    def _after_launch(self, name: str, request: LaunchRequest) -> InstanceInfo:
        info = self.describe(name)
        if info.state != "unknown":
            return info
        # Azure accepted the VM; only the look afterwards failed.
        return InstanceInfo(
            instance_id=name, zone=request.zone, market=request.market, instance_type=request.instance_type,
            state="pending", client_token=request.client_token, detail={"note": info.detail.get("error", "")},
        )

    def _raise_if_refused(self, info: InstanceInfo) -> None:
        if _refused(info):
            self._discard_failed(info.instance_id)
            raise _REFUSALS[info.detail["refusal"]](str(info.detail.get("reason", info.detail["refusal"])))

    def _discard_failed(self, name: str) -> None:
        """Delete a VM whose allocation failed (it holds its NIC and disk); a failure here only delays that."""
        try:
            self.terminate(name)
        except Exception:  # the controller terminates the instance of an ended attempt again
            log.warning("could not delete VM %s after its allocation failed", name, exc_info=True)

    # -- look --------------------------------------------------------------------------------------------

    def describe(self, instance_id: str) -> InstanceInfo:
        """Azure's view with the instance view; a failed call answers state="unknown", a deleted VM "terminated"."""
        check_vm_name(instance_id)
        try:
            found = self._fetch(instance_id)
        except AzureError as error:
            code = error_code(error) or type(error).__name__
            return unknown_info(instance_id, f"virtualMachines/read failed: {code}: {error_message(error)}")
        if found is None:
            return self._vanished(instance_id)
        return found

    def find_by_token(self, client_token: str) -> InstanceInfo | None:
        """The launch's VM; none while Azure is deleting it: as for a relaunch (`_relaunch`), a VM being deleted is no
        longer the launch's instance (the controller, having given up the launch after launch_timeout, would run
        the attempt on it and read its going as an eviction, billed). None either for a VM whose allocation failed
        (no capacity, quota, ...): nothing ever ran on it, and taken as the launch's instance its attempt ended lost,
        not refused; the launch tried again with its token raises the refusal it stands for (`_raise_if_refused`)."""
        found = self._get(vm_name(client_token))
        if found is None or found.client_token != client_token or _being_deleted(found) or _refused(found):
            return None
        return found

    def list_instances(self) -> list[InstanceInfo]:
        """Every VM of the resource group tagged with a client token, as `describe` sees it."""
        with _arm("Microsoft.Compute/virtualMachines/read"):
            names = [
                str(vm.name) for vm in self.compute.virtual_machines.list(self.resource_group)
                if TOKEN_TAG in (vm.tags or {})
            ]
        return [self.describe(name) for name in names]

    def _get(self, name: str) -> InstanceInfo | None:
        """The VM, or None if Azure has no such VM; a failed call raises, translated."""
        with _arm("Microsoft.Compute/virtualMachines/read"):
            return self._fetch(name)

    def _fetch(self, name: str) -> InstanceInfo | None:
        """The VM with its instance view, or None if Azure has no such VM; a failed call raises AzureError (a 404
        that does not say the VM is gone too: a failed probe is "unknown", never "terminated")."""
        try:
            vm = self.compute.virtual_machines.get(self.resource_group, name, expand="instanceView")
        except AzureError as error:
            if vm_gone(error):
                return None
            raise
        info = instance_info(vm, self.settings.location)
        if self._evicting(name, info):
            info = replace(info, reclaimed=True, detail={
                **info.detail, "reason": "deleting: evicted (spot, eviction policy Delete), or deleted outside spotrun"})
        self._last_seen[name] = info
        return info

    def recall(self, recorded: InstanceInfo) -> None:
        """What the controller's store holds of a VM spotrun launched and has not deleted, for a process that has not
        seen it (a controller restarted): a spot VM that Azure deletes or has deleted then reads as evicted, as one
        this process saw. Its eviction policy is the settings' (every spot VM is launched with it)."""
        if recorded.instance_id in self._last_seen:
            return  # what Azure showed this process is better
        detail = {"eviction_policy": self.settings.eviction_policy} if recorded.market == "spot" else {}
        self._last_seen[recorded.instance_id] = replace(recorded, detail=detail)

    def _evicting(self, name: str, info: InstanceInfo) -> bool:
        """A spot VM with eviction policy Delete that Azure is deleting though this process did not delete it: the
        eviction's deletion in progress, read as `_vanished` reads the VM once it is gone."""
        return (
            name in self._last_seen
            and name not in self._deleted_here
            and info.market == "spot"
            and info.detail.get("eviction_policy") == "Delete"
            and _being_deleted(info)
        )

    def _vanished(self, name: str) -> InstanceInfo:
        """A VM Azure no longer has. A spot VM with eviction policy Delete that this process did not delete was,
        most likely, evicted; the activity log would tell that from a person deleting it, but is not read here."""
        seen = self._last_seen.get(name)
        deleted_here = name in self._deleted_here
        evictable = seen is not None and seen.market == "spot" and seen.detail.get("eviction_policy") == "Delete"
        reclaimed = evictable and not deleted_here
        if deleted_here:
            reason = "deleted by spotrun"
        elif reclaimed:
            reason = "gone: evicted (spot, eviction policy Delete), or deleted outside spotrun"
        else:
            reason = "gone: deleted outside spotrun"
        return InstanceInfo(
            instance_id=name,
            zone=seen.zone if seen else "",
            market=seen.market if seen else "spot",
            instance_type=seen.instance_type if seen else "",
            state="terminated",
            reclaimed=reclaimed,
            launched_at=seen.launched_at if seen else None,
            client_token=seen.client_token if seen else None,
            detail={"reason": reason, "vanished": True},
        )

    # -- end ---------------------------------------------------------------------------------------------

    def terminate(self, instance_id: str) -> None:
        """Start deleting the VM with its NIC and disk; idempotent (an unknown VM is fine). Returns once Azure
        accepted the deletion; the VM then describes as terminated (provisioning state Deleting)."""
        check_vm_name(instance_id)
        if not self._gone_before_terminate(instance_id):
            self._deleted_here.add(instance_id)
        try:
            self.compute.virtual_machines.begin_delete(self.resource_group, instance_id, polling=False)
        except AzureError as error:
            if vm_gone(error):
                return
            raise translate(error, "Microsoft.Compute/virtualMachines/delete") from error
        log.info("deleting VM %s", instance_id)

    def _gone_before_terminate(self, name: str) -> bool:
        """A VM this process saw that Azure no longer has (or is deleting for an eviction) when it is terminated went
        without spotrun (evicted, most likely): terminate must not claim its deletion, or describe would report the
        eviction as spotrun's delete."""
        if name not in self._last_seen or name in self._deleted_here:
            return False
        try:
            found = self._fetch(name)
        except AzureError:
            return False  # not known: count the deletion as ours, as before
        return found is None or (found.reclaimed and _being_deleted(found))

    def preempt(self, instance_id: str, notice_seconds: float | None = None) -> None:
        """Azure's simulated eviction of a spot VM: a Preempt scheduled event, then eviction about 30 s later
        (Azure's notice; `notice_seconds` cannot change it)."""
        check_vm_name(instance_id)
        if notice_seconds is not None:
            log.info("Azure gives its own eviction notice (about 30 s); notice_seconds=%s is not used", notice_seconds)
        with _arm("Microsoft.Compute/virtualMachines/simulateEviction/action"):
            self.compute.virtual_machines.simulate_eviction(self.resource_group, instance_id)


@contextmanager
def _arm(operation: str) -> Iterator[None]:
    try:
        yield
    except AzureError as error:
        raise translate(error, operation) from error


def _validate(request: LaunchRequest, location: str) -> None:
    check_token_and_market(request, MAX_CLIENT_TOKEN_LENGTH)
    if not request.instance_type:
        raise ValueError("launch request needs an instance_type")
    if request.max_price is not None and request.max_price <= 0:
        raise ValueError(f"max_price must be > 0, got {request.max_price}")
    zones_field(location, request.zone)  # raises for a zone of another location


def _refused(info: InstanceInfo) -> bool:
    """A VM whose allocation failed with one of the refusals a launch answers (`_REFUSALS`)."""
    return info.state == "terminated" and info.detail.get("refusal", "") in _REFUSALS


def _being_deleted(info: InstanceInfo) -> bool:
    return str(info.detail.get("provisioning_state", "")).lower() == "deleting"


def _check_same_request(existing: InstanceInfo, request: LaunchRequest) -> None:
    had = (existing.zone, existing.market, existing.instance_type.lower())
    asked = (request.zone, request.market, request.instance_type.lower())
    if had != asked:
        raise ValueError(f"client token {request.client_token!r} was used for {existing.instance_id} {had}, not for {asked}")
