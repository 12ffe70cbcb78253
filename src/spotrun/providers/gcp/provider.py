"""Google Compute Engine as a provider: Spot (or legacy preemptible) and standard VMs through google-cloud-compute.

Every client uses the REST transport. The SDK's own operation helper (`insert(...).result()`) polls through a
ZoneOperationsClient it builds without this provider's client options, i.e. against compute.googleapis.com
whatever endpoint was configured, so this provider calls the `*_unary` methods and waits on operations with
its own ZoneOperationsClient.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import google.auth
import google.auth.exceptions
import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry
from google.auth.credentials import Credentials
from google.cloud import compute_v1

from spotrun.gcp_accelerators import accelerator_types, accelerators_text
from spotrun.providers.base import InstanceInfo, LaunchRequest, check_token_and_market
from spotrun.providers.gcp.body import instance_resource
from spotrun.providers.gcp.errors import GcpApiError, is_refusal, translate_http, translate_operation
from spotrun.providers.gcp.instances import (
    PREEMPTED_OPERATION,
    gone_info,
    instance_info,
    market_of,
    metadata_value,
    timestamp,
    unknown_info,
)
from spotrun.providers.gcp.naming import (
    TOKEN_LABEL,
    TOKEN_METADATA_KEY,
    check_zone,
    instance_name,
    last_segment,
    parse_instance_id,
    request_id,
)
from spotrun.providers.gcp.settings import GcpSettings
from spotrun.providers.zone_cache import ZoneCache

log = logging.getLogger(__name__)

CLOUD = "gcp"
MAX_CLIENT_TOKEN_LENGTH = 128
_DONE = compute_v1.Operation.Status.DONE
_TRANSIENT = (
    api_exceptions.InternalServerError,
    api_exceptions.BadGateway,
    api_exceptions.ServiceUnavailable,
    api_exceptions.GatewayTimeout,
    api_exceptions.DeadlineExceeded,
    requests.ConnectionError,
    requests.Timeout,
)
# What a failed call raises: the API's errors (RetryError when retries ran out), or the HTTP layer's.
CALL_ERRORS = (api_exceptions.GoogleAPIError, requests.RequestException)


class GcpProvider:
    """Compute Engine VMs, described by `GcpSettings` (arguments here override SPOTRUN_GCP_* variables).

    `credentials` and `client_options` are for pointing the SDK elsewhere (tests use anonymous credentials and
    a local API endpoint); otherwise credentials come only from google-auth's standard chain.
    """

    name = CLOUD

    def __init__(
        self,
        settings: GcpSettings | None = None,
        *,
        credentials: Credentials | None = None,
        client_options: Mapping[str, Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **options: Any,
    ) -> None:
        if settings is not None and options:
            raise TypeError("pass either settings or individual options, not both")
        self.settings = settings or GcpSettings.from_env(**options)
        self.project = self.settings.project or _default_project()
        clients = {"credentials": credentials, "client_options": dict(client_options or {}), "transport": "rest"}
        self.instances = compute_v1.InstancesClient(**clients)
        self.operations = compute_v1.ZoneOperationsClient(**clients)
        self.zones_client = compute_v1.ZonesClient(**clients)
        self.machine_types = compute_v1.MachineTypesClient(**clients)
        self.accelerator_types = compute_v1.AcceleratorTypesClient(**clients)
        self._sleep = sleep
        self._zone_cache = ZoneCache()

    @property
    def max_lifetime_seconds(self) -> float | None:
        """The longest a spot instance lives whatever the market does (24 h for legacy preemptible VMs)."""
        return self.settings.max_lifetime_seconds

    # -- where -------------------------------------------------------------------------------------------

    def zones(self, instance_type: str, accelerators: Mapping[str, int] | None = None) -> list[str]:
        """Zones of the project that are UP, offer machine type `instance_type` and each of `accelerators` (GPU name
        → count, attached to the machine) with that many cards a VM (`ZoneCache`: asked at most every 10 minutes).
        Most zones that offer an N1 type offer few of the GPUs; GCE refuses a launch with a GPU its zone lacks."""
        if not instance_type:
            raise ValueError("zones() needs a machine type such as n1-standard-8")
        wanted = accelerator_types(accelerators or {})
        if not wanted:
            return self._zone_cache.zones(instance_type, lambda: self._list_zones(instance_type))
        machine_zones = self.zones(instance_type)  # not inside the cache's ask below: its lock is not reentrant
        key = f"{instance_type} {accelerators_text(accelerators or {})}"
        return self._zone_cache.zones(key, lambda: self._zones_with(machine_zones, wanted))

    def _zones_with(self, machine_zones: list[str], accelerators: Mapping[str, int]) -> list[str]:
        """Those of the machine's zones that offer each of `accelerators` with its count of cards."""
        offered = set(machine_zones)
        for name, count in accelerators.items():
            offered &= self._accelerator_zones(name, count)
        return sorted(offered)

    def _list_zones(self, instance_type: str) -> list[str]:
        offered = self._machine_type_zones(instance_type)
        up = {
            zone.name
            for zone in self._call(
                "compute.zones.list", self.zones_client.list,
                request=compute_v1.ListZonesRequest(project=self.project), paged=True,
            )
            if zone.status == "UP"
        }
        return sorted(offered & up)

    def _machine_type_zones(self, instance_type: str) -> set[str]:
        return self._zones_listing(
            "compute.machineTypes.aggregatedList", self.machine_types.aggregated_list,
            compute_v1.AggregatedListMachineTypesRequest(project=self.project, filter=f'name = "{instance_type}"'),
            lambda scoped: any(machine.name == instance_type for machine in scoped.machine_types),
        )

    def _accelerator_zones(self, name: str, count: int) -> set[str]:
        """Zones that offer accelerator type `name` with at least `count` cards a VM."""
        return self._zones_listing(
            "compute.acceleratorTypes.aggregatedList", self.accelerator_types.aggregated_list,
            compute_v1.AggregatedListAcceleratorTypesRequest(project=self.project, filter=f'name = "{name}"'),
            lambda scoped: any(kind.name == name and kind.maximum_cards_per_instance >= count
                               for kind in scoped.accelerator_types),
        )

    def _zones_listing(self, call: str, method: Callable[..., Any], request: Any, offers: Callable[[Any], bool]) -> set[str]:
        """The zones of an aggregated list whose own list `offers` what is asked."""
        return {scope.removeprefix("zones/") for scope, scoped in self._call(call, method, request=request, paged=True)
                if offers(scoped)}

    # -- launch ------------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        _validate(request)
        body = instance_resource(request, self.settings, request.accelerators or {})  # the job's resources.accelerators
        insert = compute_v1.InsertInstanceRequest(
            project=self.project, zone=request.zone, instance_resource=body, request_id=request_id(request.client_token)
        )
        try:
            operation = self.instances.insert_unary(request=insert, **self._call_options())
        except api_exceptions.Conflict:
            # The name comes from the client token: an instance with it is this launch's, made before.
            return self._existing(request, body.name)
        except CALL_ERRORS as error:
            raise _translate(error, "compute.instances.insert") from error
        self._wait(operation, request.zone, f"insert of {body.name}")
        info = self._launched(request, body.name, operation)
        log.info(
            "launched %s: %s %s in %s (client token %s)",
            info.instance_id, request.market, request.instance_type, request.zone, request.client_token,
        )
        return info

    def _existing(self, request: LaunchRequest, name: str) -> InstanceInfo:
        info = self._describe_live(request.zone, name, "compute.instances.get")
        if info.client_token != request.client_token:
            raise ValueError(
                f"instance {info.instance_id} exists but was not launched for client token {request.client_token!r}"
            )
        _check_same_request(info, request)
        return info

    def _launched(self, request: LaunchRequest, name: str, insert: compute_v1.Operation) -> InstanceInfo:
        """The instance the insert made. GCE may have preempted and deleted it already: it is answered as gone
        (reclaimed), which the controller ends as a preemption, launched when the insert was (its bill's start).
        Raised instead, the launch was retried to its timeout and ended as an error, on an instance GCE had billed."""
        try:
            instance = self._get(request.zone, name)
            if instance is None:
                gone = gone_info(request.zone, name, self._preemptions(request.zone).get(name))
                return replace(gone, market=request.market, instance_type=request.instance_type,
                               client_token=request.client_token, launched_at=timestamp(insert.insert_time))
        except CALL_ERRORS as error:
            raise _translate(error, "compute.instances.get") from error
        return instance_info(instance)

    def _wait(self, operation: compute_v1.Operation, zone: str, what: str) -> None:
        """Until `operation` is DONE; its error raised as a refusal or GcpApiError."""
        deadline = time.monotonic() + self.settings.operation_timeout
        while operation.status != _DONE:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GcpApiError(
                    what, "Timeout",
                    f"operation {operation.name} not done after {self.settings.operation_timeout:.0f} s "
                    "(an instance it makes later is swept as an orphan)",
                )
            operation = self._call(
                "compute.zoneOperations.wait", self.operations.wait,
                request=compute_v1.WaitZoneOperationRequest(project=self.project, zone=zone, operation=operation.name),
            )
            if operation.status != _DONE:
                self._sleep(min(self.settings.poll_interval, max(remaining, 0.0)))
        if operation.error.errors or operation.http_error_status_code >= 400:
            raise translate_operation(operation, what)

    # -- look --------------------------------------------------------------------------------------------

    def describe(self, instance_id: str) -> InstanceInfo:
        """GCE's view; a failed call answers state="unknown". A spot VM GCE preempted is `reclaimed`, also once
        deleted: the zone's compute.instances.preempted operations tell a preemption from a deletion."""
        zone, name = parse_instance_id(instance_id)
        try:
            instance = self._get(zone, name)
            preemption = self._preemption_of(instance) if instance is not None else self._preemptions(zone).get(name)
        except CALL_ERRORS as error:
            return unknown_info(zone, name, _failure(error, "describe"))
        if instance is None:
            return gone_info(zone, name, preemption)
        return instance_info(instance, preemption)

    def find_by_token(self, client_token: str) -> InstanceInfo | None:
        found = self._aggregated_instances(f'name = "{instance_name(client_token)}"')
        mine = [instance for instance in found if metadata_value(instance, TOKEN_METADATA_KEY) == client_token]
        if not mine:
            return None
        return self._with_preemptions(mine)[0]

    def list_instances(self) -> list[InstanceInfo]:
        """Every instance spotrun launched in the project (labelled with a client token), stopped ones included."""
        return self._with_preemptions(self._aggregated_instances(f"labels.{TOKEN_LABEL}:*"))

    def _aggregated_instances(self, filter_: str) -> list[compute_v1.Instance]:
        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=filter_)
        pages = self._call("compute.instances.aggregatedList", self.instances.aggregated_list, request=request, paged=True)
        return [instance for _, scoped in pages for instance in scoped.instances]

    def _with_preemptions(self, instances: Iterable[compute_v1.Instance]) -> list[InstanceInfo]:
        try:
            return [instance_info(instance, self._preemption_of(instance)) for instance in instances]
        except CALL_ERRORS as error:
            raise _translate(error, "compute.zoneOperations.list") from error

    def _describe_live(self, zone: str, name: str, operation: str) -> InstanceInfo:
        try:
            instance = self._get(zone, name)
        except CALL_ERRORS as error:
            raise _translate(error, operation) from error
        if instance is None:
            raise GcpApiError(operation, "notFound", f"instance {zone}/{name} does not exist")
        return instance_info(instance)

    def _get(self, zone: str, name: str) -> compute_v1.Instance | None:
        try:
            return self.instances.get(project=self.project, zone=zone, instance=name, **self._call_options())
        except api_exceptions.NotFound:
            return None

    def _preemption_of(self, instance: compute_v1.Instance) -> compute_v1.Operation | None:
        if market_of(instance) != "spot" or instance.status in ("PENDING", "PROVISIONING", "STAGING", "RUNNING"):
            return None
        return self._preemptions(last_segment(instance.zone)).get(instance.name)

    def _preemptions(self, zone: str) -> dict[str, compute_v1.Operation]:
        """The latest compute.instances.preempted operation of each instance in `zone`, by instance name."""
        request = compute_v1.ListZoneOperationsRequest(
            project=self.project, zone=zone, filter=f'operationType = "{PREEMPTED_OPERATION}"'
        )
        found: dict[str, compute_v1.Operation] = {}
        for operation in self.operations.list(request=request, **self._call_options()):
            if "/instances/" not in operation.target_link:
                continue
            name = last_segment(operation.target_link)
            if name not in found or operation.insert_time >= found[name].insert_time:
                found[name] = operation
        return found

    # -- end ---------------------------------------------------------------------------------------------

    def terminate(self, instance_id: str) -> None:
        """Idempotent: an instance GCE no longer has is fine. Returns once GCE accepted the deletion."""
        zone, name = parse_instance_id(instance_id)
        try:
            operation = self.instances.delete_unary(project=self.project, zone=zone, instance=name, **self._call_options())
        except api_exceptions.NotFound:
            return
        except CALL_ERRORS as error:
            raise _translate(error, "compute.instances.delete") from error
        if operation.error.errors:
            raise translate_operation(operation, f"delete of {instance_id}")
        log.info("deleting %s", instance_id)

    def preempt(self, instance_id: str, notice_seconds: float | None = None) -> None:
        """Chaos: a simulated host maintenance event, which GCE answers for a Spot VM with a real preemption
        (its own ~30 s notice on the metadata server; `notice_seconds` cannot change that)."""
        zone, name = parse_instance_id(instance_id)
        if notice_seconds is not None:
            log.info("GCE gives its own preemption notice; notice_seconds=%s is not used", notice_seconds)
        self._call(
            "compute.instances.simulateMaintenanceEvent", self.instances.simulate_maintenance_event_unary,
            project=self.project, zone=zone, instance=name,
        )

    # -- calls -------------------------------------------------------------------------------------------

    def _call_options(self) -> dict[str, Any]:
        """A retry of transient failures within call_timeout (the SDK's default retries for 10 minutes)."""
        timeout = self.settings.call_timeout
        retry = Retry(predicate=_transient, initial=0.2, maximum=5.0, multiplier=2.0, timeout=timeout)
        return {"retry": retry, "timeout": timeout}

    def _call(self, name: str, method: Callable[..., Any], paged: bool = False, **arguments: Any) -> Any:
        try:
            result = method(**arguments, **self._call_options())
            return list(result) if paged else result
        except CALL_ERRORS as error:
            raise _translate(error, name) from error


def _transient(error: BaseException) -> bool:
    return isinstance(error, _TRANSIENT) and not is_refusal(error)


def _translate(error: BaseException, operation: str) -> Exception:
    if isinstance(error, api_exceptions.RetryError) and isinstance(error.cause, api_exceptions.GoogleAPICallError):
        error = error.cause
    if isinstance(error, api_exceptions.GoogleAPICallError):
        return translate_http(error, operation)
    return GcpApiError(operation, type(error).__name__, str(error))


def _failure(error: BaseException, what: str) -> str:
    code = getattr(error, "code", None) or type(error).__name__
    return f"{code}: {what} failed: {getattr(error, 'message', None) or error}"


def _default_project() -> str:
    try:
        _, project = google.auth.default()
    except google.auth.exceptions.DefaultCredentialsError as error:
        raise ValueError(f"no GCP project: set project= or SPOTRUN_GCP_PROJECT ({error})") from error
    if not project:
        raise ValueError("no GCP project: set project=, SPOTRUN_GCP_PROJECT or GOOGLE_CLOUD_PROJECT")
    return project


def _validate(request: LaunchRequest) -> None:
    check_token_and_market(request, MAX_CLIENT_TOKEN_LENGTH)
    check_zone(request.zone)
    if not request.instance_type:
        raise ValueError("launch request needs an instance_type (a GCE machine type such as n1-standard-8)")
    # GCE prices Spot VMs itself and takes no bid: max_price is not sent.


def _check_same_request(existing: InstanceInfo, request: LaunchRequest) -> None:
    had = (existing.zone, existing.market, existing.instance_type)
    asked = (request.zone, request.market, request.instance_type)
    if had != asked:
        raise ValueError(f"client token {request.client_token!r} was used for {existing.instance_id} {had}, not for {asked}")
