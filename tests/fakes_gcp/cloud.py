"""The fake project's state: zones, machine types, instances and zone operations, and the knobs tests turn.

Resources are kept as the JSON GCE speaks (camelCase), so what a test reads is what the SDK sent or got.
Every method is thread-safe: the HTTP server answers from several threads.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

LINK_BASE = "https://www.googleapis.com/compute/v1"
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
MAX_METADATA_VALUE = 256 * 1024


class ApiError(Exception):
    """An HTTP error reply in GCE's format."""

    def __init__(self, status: int, reason: str, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.details = status, reason, message, details or []

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": self.status,
            "message": self.message,
            "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
        }
        if self.details:
            error["details"] = self.details
        return {"error": error}


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class _Fault:
    method: str
    path_part: str
    error: ApiError
    times: int


@dataclass
class OperationError:
    """How the next insert's operation ends: GCE's error code, message and HTTP status of the failure."""

    code: str
    message: str
    http_status: int = 503
    http_message: str = "SERVICE UNAVAILABLE"
    error_info_reason: str | None = None


@dataclass
class _Pending:
    operation: dict[str, Any]
    polls_left: int
    finish: Any  # callable run when the operation completes


@dataclass
class FakeCloud:
    project: str = "spotrun-test"
    zones: dict[str, str] = field(default_factory=lambda: {
        "us-central1-a": "UP", "us-central1-b": "UP", "us-central1-c": "DOWN", "europe-west4-a": "UP",
    })
    machine_types: dict[str, set[str]] = field(default_factory=lambda: {
        "us-central1-a": {"n1-standard-8", "e2-small"},
        "us-central1-b": {"n1-standard-8"},
        "us-central1-c": {"n1-standard-8"},
        "europe-west4-a": {"e2-small"},
    })
    # The GPUs each zone offers to attach to a VM, and how many cards of each one VM may take (GCE's
    # acceleratorTypes); as in GCE, far fewer zones offer a GPU than offer the N1 types it attaches to
    accelerator_types: dict[str, dict[str, int]] = field(default_factory=lambda: {
        "us-central1-a": {"nvidia-tesla-t4": 4},
        "us-central1-b": {"nvidia-tesla-v100": 8, "nvidia-tesla-t4": 4},
        "us-central1-c": {"nvidia-tesla-v100": 8},
        "europe-west4-a": {},
    })
    # GCE's published shapes of the types above and of those the price tests ask about: vCPUs, memory in MB, the
    # GPUs a type comes with, and whether its cores are shared
    machine_shapes: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "n1-standard-8": {"guestCpus": 8, "memoryMb": 30720},
        "n2-standard-8": {"guestCpus": 8, "memoryMb": 32768},
        "e2-small": {"guestCpus": 2, "memoryMb": 2048, "isSharedCpu": True},
        "g2-standard-8": {"guestCpus": 8, "memoryMb": 32768,
                          "accelerators": [{"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}]},
        "a2-highgpu-1g": {"guestCpus": 12, "memoryMb": 87040,
                          "accelerators": [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}]},
    })
    operation_polls: int = 1  # looks (get or wait) an operation needs before it is DONE
    page_size: int = 500  # items per list page (maxResults from the client caps it further)
    deletes_at_once: bool = True  # False: a deleted instance stays STOPPING until its operation is looked at

    def __post_init__(self) -> None:
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[RecordedRequest] = []
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._request_ids: dict[str, tuple[str, str]] = {}
        self._faults: list[_Fault] = []
        self._insert_errors: list[OperationError] = []
        self._ids = itertools.count(1000)
        self.lock = threading.RLock()

    # -- knobs for tests --------------------------------------------------------------------------------

    def fail_next(self, method: str, path_part: str, status: int, reason: str, message: str = "injected failure",
                  times: int = 1, details: list[dict[str, Any]] | None = None) -> None:
        """The next `times` requests `method` whose path contains `path_part` get this HTTP error reply."""
        with self.lock:
            self._faults.append(_Fault(method.upper(), path_part, ApiError(status, reason, message, details), times))

    def fail_next_insert_operation(self, error: OperationError) -> None:
        """The next insert is accepted, and its operation ends with `error` (no instance is left)."""
        with self.lock:
            self._insert_errors.append(error)

    def forget_request_ids(self) -> None:
        """As when GCE's request-id memory expired: a repeated insert then meets the existing name."""
        with self.lock:
            self._request_ids.clear()

    def preempt(self, zone: str, name: str, shutting_down: bool = False) -> dict[str, Any]:
        """GCE reclaims a spot instance: a compute.instances.preempted operation, then the termination action.
        `shutting_down`: the instance stays STOPPING, its guest running its shutdown (GCE gives it up to 30 s),
        until `end_shutdown`."""
        with self.lock:
            instance = self._instance(zone, name)
            scheduling = instance.get("scheduling", {})
            if scheduling.get("provisioningModel") != "SPOT" and not scheduling.get("preemptible"):
                raise ValueError(f"{zone}/{name} is not a spot instance; GCE does not preempt it")
            operation = self._operation(zone, "compute.instances.preempted", instance, user="system@google.com")
            self._finish(operation)
            if shutting_down:
                instance["status"] = "STOPPING"
            else:
                self.end_shutdown(zone, name)
            return operation

    def end_shutdown(self, zone: str, name: str) -> None:
        """A preempted instance's shutdown is over: stopped, or deleted if that is its termination action."""
        with self.lock:
            instance = self._instance(zone, name)
            instance["status"] = "TERMINATED"
            instance["lastStopTimestamp"] = _now()
            if instance.get("scheduling", {}).get("instanceTerminationAction") == "DELETE":
                del self.instances[(zone, name)]

    def stop(self, zone: str, name: str) -> None:
        """Someone stopped the instance (not a preemption)."""
        with self.lock:
            instance = self._instance(zone, name)
            self._finish(self._operation(zone, "stop", instance))
            instance["status"] = "TERMINATED"
            instance["lastStopTimestamp"] = _now()

    def requests_to(self, method: str, path_part: str) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self.requests if r.method == method.upper() and path_part in r.path]

    # -- what the API does ------------------------------------------------------------------------------

    def record(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)
            for fault in self._faults:
                if fault.method == request.method and fault.path_part in request.path and fault.times > 0:
                    fault.times -= 1
                    raise fault.error

    def check_project(self, project: str) -> None:
        if project != self.project:
            raise ApiError(404, "notFound", f"The resource 'projects/{project}' was not found")

    def check_zone(self, zone: str) -> None:
        if zone not in self.zones:
            raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}' was not found")

    def zone_resources(self) -> list[dict[str, Any]]:
        return [
            {"kind": "compute#zone", "name": zone, "status": status, "region": f"{LINK_BASE}/projects/{self.project}/regions/{zone[:-2]}",
             "selfLink": self._zone_link(zone)}
            for zone, status in sorted(self.zones.items())
        ]

    def machine_type_resources(self, zone: str) -> list[dict[str, Any]]:
        return [
            {"kind": "compute#machineType", "name": name, "zone": zone, "selfLink": f"{self._zone_link(zone)}/machineTypes/{name}",
             **self.machine_shapes.get(name, {})}
            for name in sorted(self.machine_types.get(zone, ()))
        ]

    def accelerator_type_resources(self, zone: str) -> list[dict[str, Any]]:
        return [
            {"kind": "compute#acceleratorType", "name": name, "zone": self._zone_link(zone),
             "selfLink": f"{self._zone_link(zone)}/acceleratorTypes/{name}", "maximumCardsPerInstance": cards}
            for name, cards in sorted(self.accelerator_types.get(zone, {}).items())
        ]

    def insert(self, zone: str, body: dict[str, Any], request_id: str | None) -> dict[str, Any]:
        with self.lock:
            self.check_zone(zone)
            if request_id and request_id in self._request_ids:
                return self.operations[self._request_ids[request_id]]
            name = body.get("name", "")
            self._validate_insert(zone, body)
            if (zone, name) in self.instances:
                raise ApiError(409, "alreadyExists", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists")
            instance = self._new_instance(zone, body)
            operation = self._operation(zone, "insert", instance)
            error = self._insert_errors.pop(0) if self._insert_errors else None
            if error is None:
                self.instances[(zone, name)] = instance
            self._pending[(zone, operation["name"])] = _Pending(
                operation, self.operation_polls, lambda: self._finish_insert(zone, name, operation, error)
            )
            if request_id:
                self._request_ids[request_id] = (zone, operation["name"])
            return operation

    def get_instance(self, zone: str, name: str) -> dict[str, Any]:
        with self.lock:
            return self._instance(zone, name)

    def list_instances(self, zone: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [i for (z, _), i in sorted(self.instances.items()) if zone is None or z == zone]

    def delete(self, zone: str, name: str) -> dict[str, Any]:
        with self.lock:
            instance = self._instance(zone, name)
            operation = self._operation(zone, "delete", instance)
            instance["status"] = "STOPPING"
            if self.deletes_at_once:
                self._finish_delete(zone, name, operation)
            else:
                self._pending[(zone, operation["name"])] = _Pending(
                    operation, self.operation_polls, lambda: self._finish_delete(zone, name, operation)
                )
            return operation

    def simulate_maintenance(self, zone: str, name: str) -> dict[str, Any]:
        """For a spot VM, a real preemption; others (live migrating) carry on."""
        with self.lock:
            instance = self._instance(zone, name)
            operation = self._operation(zone, "simulateMaintenanceEvent", instance)
            self._finish(operation)
            scheduling = instance.get("scheduling", {})
            if scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible"):
                self.preempt(zone, name)
            return operation

    def look_at_operation(self, zone: str, name: str) -> dict[str, Any]:
        """get/wait: one more look; the operation is DONE after `operation_polls` of them."""
        with self.lock:
            self.check_zone(zone)
            if (zone, name) not in self.operations:
                raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/operations/{name}' was not found")
            pending = self._pending.get((zone, name))
            if pending is not None:
                pending.polls_left -= 1
                if pending.polls_left <= 0:
                    del self._pending[(zone, name)]
                    pending.finish()
            return self.operations[(zone, name)]

    def list_operations(self, zone: str) -> list[dict[str, Any]]:
        with self.lock:
            self.check_zone(zone)
            return [op for (z, _), op in sorted(self.operations.items(), key=lambda item: item[1]["id"]) if z == zone]

    # -- inside ----------------------------------------------------------------------------------------

    def _instance(self, zone: str, name: str) -> dict[str, Any]:
        self.check_zone(zone)
        found = self.instances.get((zone, name))
        if found is None:
            raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' was not found")
        return found

    def _validate_insert(self, zone: str, body: dict[str, Any]) -> None:
        name = body.get("name", "")
        if not _NAME.fullmatch(name):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'")
        machine = body.get("machineType", "").rsplit("/", 1)[-1]
        if machine not in self.machine_types.get(zone, ()):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.machineType': '{body.get('machineType')}'. Machine type with name '{machine}' does not exist in zone '{zone}'.")
        for key, value in body.get("labels", {}).items():
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
                raise ApiError(400, "invalid", f"Invalid value for field 'resource.labels': '{key}={value}'")
        for item in body.get("metadata", {}).get("items", []):
            if len(item.get("value", "").encode()) > MAX_METADATA_VALUE:
                raise ApiError(400, "invalid", f"Metadata value for key '{item.get('key')}' is too large")
        scheduling = body.get("scheduling", {})
        if scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible"):
            if scheduling.get("automaticRestart", True) or scheduling.get("onHostMaintenance", "MIGRATE") != "TERMINATE":
                raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling': Spot and preemptible instances must have automaticRestart false and onHostMaintenance TERMINATE")
        if body.get("guestAccelerators") and scheduling.get("onHostMaintenance", "MIGRATE") != "TERMINATE":
            raise ApiError(400, "invalid", "Instances with guest accelerators do not support live migration.")
        for number, accelerator in enumerate(body.get("guestAccelerators", [])):
            kind = accelerator.get("acceleratorType", "").rsplit("/", 1)[-1]
            cards = self.accelerator_types.get(zone, {}).get(kind)
            if cards is None:
                raise ApiError(400, "badRequest", f"The resource 'projects/{self.project}/zones/{zone}/acceleratorTypes/{kind}' was not found")
            if accelerator.get("acceleratorCount", 0) > cards:
                raise ApiError(400, "invalid", f"Invalid value for field 'resource.guestAccelerators[{number}].acceleratorCount': '{accelerator.get('acceleratorCount')}'. At most {cards} cards of {kind} may be attached to a VM.")

    def _new_instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        instance = dict(body)
        interfaces = [dict(interface) for interface in body.get("networkInterfaces", [{}])]
        for number, interface in enumerate(interfaces):
            interface["networkIP"] = f"10.128.0.{next(self._ids) % 250 + 2}"
            interface["name"] = f"nic{number}"
            interface["accessConfigs"] = [dict(access, natIP="34.70.0.9") for access in interface.get("accessConfigs", [])]
        instance.update({
            "kind": "compute#instance",
            "id": str(next(self._ids)),
            "creationTimestamp": _now(),
            "status": "PROVISIONING",
            "zone": self._zone_link(zone),
            "machineType": f"{self._zone_link(zone)}/machineTypes/{body['machineType'].rsplit('/', 1)[-1]}",
            "selfLink": f"{self._zone_link(zone)}/instances/{body['name']}",
            "networkInterfaces": interfaces,
        })
        return instance

    def _operation(self, zone: str, kind: str, instance: dict[str, Any], user: str = "spotrun@example.com") -> dict[str, Any]:
        number = next(self._ids)
        name = f"operation-{number}-{kind.rsplit('.', 1)[-1].lower()}"
        operation = {
            "kind": "compute#operation",
            "id": str(number),
            "name": name,
            "zone": self._zone_link(zone),
            "operationType": kind,
            "targetLink": instance["selfLink"],
            "targetId": instance["id"],
            "status": "RUNNING",
            "user": user,
            "progress": 0,
            "insertTime": _now(),
            "startTime": _now(),
            "selfLink": f"{self._zone_link(zone)}/operations/{name}",
        }
        self.operations[(zone, name)] = operation
        return operation

    def _finish(self, operation: dict[str, Any]) -> None:
        operation.update(status="DONE", progress=100, endTime=_now())

    def _finish_insert(self, zone: str, name: str, operation: dict[str, Any], error: OperationError | None) -> None:
        self._finish(operation)
        if error is None:
            self.instances[(zone, name)]["status"] = "RUNNING"
            return
        entry: dict[str, Any] = {"code": error.code, "message": error.message}
        if error.error_info_reason:
            entry["errorDetails"] = [{"errorInfo": {"reason": error.error_info_reason, "domain": "compute.googleapis.com",
                                                     "metadatas": {"zone": zone}}}]
        operation.update(error={"errors": [entry]}, httpErrorStatusCode=error.http_status, httpErrorMessage=error.http_message)

    def _finish_delete(self, zone: str, name: str, operation: dict[str, Any]) -> None:
        self._finish(operation)
        self.instances.pop((zone, name), None)

    def _zone_link(self, zone: str) -> str:
        return f"{LINK_BASE}/projects/{self.project}/zones/{zone}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def scoped(items: Iterable[tuple[str, list[dict[str, Any]]]], key: str) -> dict[str, Any]:
    """An aggregated list's `items`: every scope, with a warning where it holds nothing (as GCE answers)."""
    return {
        scope: {key: resources} if resources else
        {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope on this page."}}
        for scope, resources in items
    }
