"""A fake Azure Resource Manager for Microsoft.Compute virtual machines: a real HTTP server on 127.0.0.1.

It speaks the ARM paths and long-running-operation protocol that azure-mgmt-compute uses:

- PUT    .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}   201 + Azure-AsyncOperation
- GET    .../virtualMachines/{vm}[?$expand=instanceView]                               200 / 404 ResourceNotFound
- GET    .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines          paged {"value", "nextLink"}
- DELETE .../virtualMachines/{vm}                                                     202 + Azure-AsyncOperation, 204 if absent
- POST   .../virtualMachines/{vm}/simulateEviction                                    204
- GET    /subscriptions/{sub}/providers/Microsoft.Compute/locations/{loc}/operations/{id}   the operation's status
- GET    /subscriptions/{sub}/providers/Microsoft.Compute/skus?$filter=location eq '...'   paged Resource SKUs

Like Azure, it never returns osProfile.customData, answers a create as "Creating" and settles it through the
async operation (each poll of an operation moves it on by one step), and requires a bearer token. Tests script
refusals (`refuse_next_create`), allocation failures (`fail_next_allocation`), slow allocations
(`hold_allocations`), failing reads (`fail_reads`), evictions (`evict`) and deletions outside spotrun
(`delete_outside`), and read back every request in `requests`.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .transport import ARM_HOST, FAKE_TOKEN

PAGE_SIZE = 2  # small, so listings page
_RG = r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute/virtualMachines"
_ROUTES = [
    ("vm", re.compile(_RG + r"/(?P<name>[^/]+)$", re.IGNORECASE)),
    ("evict", re.compile(_RG + r"/(?P<name>[^/]+)/simulateEviction$", re.IGNORECASE)),
    ("vms", re.compile(_RG + r"$", re.IGNORECASE)),
    ("operation", re.compile(r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)$", re.IGNORECASE)),
    ("skus", re.compile(r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/skus$", re.IGNORECASE)),
]


@dataclass
class ServedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Failure:
    status: int
    code: str
    message: str
    details: list[dict[str, Any]] = field(default_factory=list)  # ARM's inner errors ({"code", "message"})


@dataclass
class Operation:
    id: str
    vm: str  # lower-case VM name
    kind: str  # "create" | "delete"
    polls_left: int
    failure: Failure | None = None
    held: bool = False
    status: str = "InProgress"


@dataclass
class FakeVm:
    name: str
    resource: dict[str, Any]  # the ARM JSON Azure would answer, without the instance view
    power_state: str | None = None  # None until allocated
    provisioning_error: Failure | None = None
    deleting_reads_left: int = 0
    status_time: str = field(default_factory=lambda: _now())


class FakeArm:
    """The fake ARM server; a context manager. `url` is its http://127.0.0.1:PORT root."""

    def __init__(self, subscription_id: str, location: str, *, token: str = FAKE_TOKEN) -> None:
        self.subscription_id = subscription_id
        self.location = location
        self.token = token
        self.requests: list[ServedRequest] = []
        self.skus: list[dict[str, Any]] = []
        self.vms: dict[str, FakeVm] = {}
        self.operations: dict[str, Operation] = {}
        self.create_polls = 1  # InProgress answers before a create settles
        self.deleting_reads = 1  # GETs of a VM being deleted that still find it (Deleting) before it is gone
        self._refusals: list[Failure] = []
        self._allocation_failures: list[Failure] = []
        self._read_failures: list[Failure] = []
        self._held = False
        self._lock = threading.RLock()
        self._connections: list[socket.socket] = []
        self._server = _QuietOnHangUp(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-arm", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeArm:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and cut the clients' kept-alive connections, as a vanished endpoint would."""
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for connection in self._connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by the client
            self._connections.clear()

    # -- scripting -----------------------------------------------------------------------------------------

    def refuse_next_create(self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None) -> None:
        """The next PUT of a new VM is answered with this ARM error, with `details` as its inner errors (as Azure
        refuses at validation)."""
        self._refusals.append(Failure(status, code, message, details or []))

    def fail_next_allocation(self, code: str, message: str) -> None:
        """The next create is accepted (201), then its async operation fails with this code."""
        self._allocation_failures.append(Failure(200, code, message))

    @contextmanager
    def hold_allocations(self) -> Iterator[None]:
        """Creates started inside stay InProgress until the block ends."""
        self._held = True
        try:
            yield
        finally:
            with self._lock:
                self._held = False
                for operation in self.operations.values():
                    operation.held = False

    def settle_all(self) -> None:
        """Finish every operation that is not held, as time would on Azure (here, operations move when polled)."""
        with self._lock:
            for operation in self.operations.values():
                if operation.status == "InProgress" and not operation.held:
                    self._settle(operation)

    def fail_reads(self, status: int, code: str, message: str = "injected failure", times: int = 1) -> None:
        """The next `times` GETs of a VM answer this error."""
        self._read_failures.extend(Failure(status, code, message) for _ in range(times))

    def evict(self, name: str) -> None:
        """What Azure does to an evicted spot VM: delete it, or deallocate it, by its eviction policy."""
        with self._lock:
            vm = self.vms[name.lower()]
            if vm.resource["properties"].get("evictionPolicy") == "Deallocate":
                vm.power_state = "deallocated"
                vm.status_time = _now()
            else:
                del self.vms[name.lower()]

    def delete_outside(self, name: str) -> None:
        """Someone deletes the VM in the portal."""
        with self._lock:
            del self.vms[name.lower()]

    def created_bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.method == "PUT" and "/virtualmachines/" in r.path.lower()]

    def count(self, method: str, path_part: str) -> int:
        return sum(1 for r in self.requests if r.method == method and path_part.lower() in r.path.lower())

    # -- serving -------------------------------------------------------------------------------------------

    def handle(self, request: ServedRequest) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            self.requests.append(request)
            if request.headers.get("authorization") != f"Bearer {self.token}":
                return _error(401, "AuthenticationFailed", "missing or wrong bearer token")
            for route, pattern in _ROUTES:
                match = pattern.match(request.path)
                if match is not None:
                    return getattr(self, f"_{route}_{request.method.lower()}", self._no_route)(request, **match.groupdict())
            return self._no_route(request)

    def _no_route(self, request: ServedRequest, **_: str) -> tuple[int, dict[str, str], Any]:
        return _error(404, "NoRoute", f"the fake ARM does not serve {request.method} {request.path}")

    def _vm_put(self, request: ServedRequest, sub: str, rg: str, name: str) -> tuple[int, dict[str, str], Any]:
        key = name.lower()
        if key in self.vms:
            self.vms[key].resource["tags"] = request.body.get("tags", {})
            return 200, {}, self._view(self.vms[key], instance_view=False)
        if self._refusals:
            failure = self._refusals.pop(0)
            return _error(failure.status, failure.code, failure.message, failure.details)
        resource = copy.deepcopy(request.body)
        resource.update({
            "id": f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{name}",
            "name": name,
            "type": "Microsoft.Compute/virtualMachines",
        })
        properties = resource.setdefault("properties", {})
        properties.update({"provisioningState": "Creating", "vmId": str(uuid.uuid4()), "timeCreated": _now()})
        properties.get("osProfile", {}).pop("customData", None)  # Azure never returns it
        self.vms[key] = FakeVm(name=name, resource=resource)
        failure = self._allocation_failures.pop(0) if self._allocation_failures else None
        operation = self._start(key, "create", self.create_polls, failure)
        return 201, self._async_headers(operation), self._view(self.vms[key], instance_view=False)

    def _vm_get(self, request: ServedRequest, sub: str, rg: str, name: str) -> tuple[int, dict[str, str], Any]:
        if self._read_failures:
            failure = self._read_failures.pop(0)
            return _error(failure.status, failure.code, failure.message)
        vm = self.vms.get(name.lower())
        if vm is None:
            return _not_found(name)
        if vm.deleting_reads_left == 0 and vm.resource["properties"]["provisioningState"] == "Deleting":
            del self.vms[name.lower()]
            return _not_found(name)
        view = self._view(vm, instance_view="instanceView" in request.query.get("$expand", []))
        if vm.resource["properties"]["provisioningState"] == "Deleting":
            vm.deleting_reads_left -= 1
        return 200, {}, view

    def _vm_delete(self, request: ServedRequest, sub: str, rg: str, name: str) -> tuple[int, dict[str, str], Any]:
        vm = self.vms.get(name.lower())
        if vm is None:
            return 204, {}, None
        vm.resource["properties"]["provisioningState"] = "Deleting"
        vm.deleting_reads_left = self.deleting_reads
        operation = self._start(name.lower(), "delete", 1, None)
        return 202, {**self._async_headers(operation), "Location": self._operation_url(operation)}, None

    def _vms_get(self, request: ServedRequest, sub: str, rg: str) -> tuple[int, dict[str, str], Any]:
        everything = [self._view(vm, instance_view=False) for vm in self.vms.values()]
        return self._page(request, everything)

    def _evict_post(self, request: ServedRequest, sub: str, rg: str, name: str) -> tuple[int, dict[str, str], Any]:
        vm = self.vms.get(name.lower())
        if vm is None:
            return _not_found(name)
        if vm.resource["properties"].get("priority") != "Spot":
            return _error(409, "OperationNotAllowed", "Simulate eviction is only supported for Azure Spot VMs.")
        self.evict(name)
        return 204, {}, None

    def _operation_get(self, request: ServedRequest, sub: str, loc: str, op: str) -> tuple[int, dict[str, str], Any]:
        operation = self.operations.get(op)
        if operation is None:
            return _error(404, "NotFound", f"operation {op} not found")
        if operation.status == "InProgress" and not operation.held:
            operation.polls_left -= 1
            if operation.polls_left < 0:
                self._settle(operation)
        body: dict[str, Any] = {"name": operation.id, "status": operation.status, "startTime": _now()}
        if operation.failure is not None and operation.status == "Failed":
            body["error"] = {"code": operation.failure.code, "message": operation.failure.message}
        return 200, {}, body

    def _skus_get(self, request: ServedRequest, sub: str) -> tuple[int, dict[str, str], Any]:
        wanted = re.fullmatch(r"location eq '([^']+)'", request.query.get("$filter", [""])[0])
        skus = [sku for sku in self.skus if wanted is None or wanted.group(1).lower() in [l.lower() for l in sku.get("locations", [])]]
        return self._page(request, skus)

    # -- state ---------------------------------------------------------------------------------------------

    def _start(self, vm: str, kind: str, polls: int, failure: Failure | None) -> Operation:
        operation = Operation(id=str(uuid.uuid4()), vm=vm, kind=kind, polls_left=polls, failure=failure, held=self._held)
        self.operations[operation.id] = operation
        return operation

    def _settle(self, operation: Operation) -> None:
        vm = self.vms.get(operation.vm)
        if operation.kind == "delete":
            self.vms.pop(operation.vm, None)
            operation.status = "Succeeded"
            return
        if vm is None:
            operation.status = "Failed"
            operation.failure = Failure(200, "ResourceNotFound", "the VM was deleted while it was being created")
            return
        vm.status_time = _now()
        if operation.failure is not None:
            vm.resource["properties"]["provisioningState"] = "Failed"
            vm.provisioning_error = operation.failure
            operation.status = "Failed"
        else:
            vm.resource["properties"]["provisioningState"] = "Succeeded"
            vm.power_state = "running"
            operation.status = "Succeeded"

    def _view(self, vm: FakeVm, instance_view: bool) -> dict[str, Any]:
        view = copy.deepcopy(vm.resource)
        if instance_view:
            state = view["properties"]["provisioningState"]
            statuses: list[dict[str, Any]] = []
            # a VM being deleted shows that alone, as Azure does: its earlier failure is no longer in its statuses
            if vm.provisioning_error is not None and state != "Deleting":
                statuses.append({
                    "code": f"ProvisioningState/failed/{vm.provisioning_error.code}",
                    "level": "Error",
                    "displayStatus": "Provisioning failed",
                    "message": vm.provisioning_error.message,
                    "time": vm.status_time,
                })
            else:
                statuses.append({
                    "code": f"ProvisioningState/{state.lower()}",
                    "level": "Info",
                    "displayStatus": f"Provisioning {state.lower()}",
                    "time": vm.status_time,
                })
            if vm.power_state is not None:
                statuses.append({"code": f"PowerState/{vm.power_state}", "level": "Info", "displayStatus": f"VM {vm.power_state}"})
            view["properties"]["instanceView"] = {"computerName": vm.name, "statuses": statuses}
        return view

    def _page(self, request: ServedRequest, items: list[dict[str, Any]]) -> tuple[int, dict[str, str], Any]:
        start = int(request.query.get("skip", ["0"])[0])
        page: dict[str, Any] = {"value": items[start:start + PAGE_SIZE]}
        if start + PAGE_SIZE < len(items):
            query = "&".join(f"{key}={value[0]}" for key, value in request.query.items() if key != "skip")
            page["nextLink"] = f"https://{ARM_HOST}{request.path}?{query}&skip={start + PAGE_SIZE}"
        return 200, {}, page

    def _async_headers(self, operation: Operation) -> dict[str, str]:
        return {"Azure-AsyncOperation": self._operation_url(operation)}

    def _operation_url(self, operation: Operation) -> str:
        return (
            f"https://{ARM_HOST}/subscriptions/{self.subscription_id}/providers/Microsoft.Compute/locations/"
            f"{self.location}/operations/{operation.id}?api-version=2024-07-01"
        )


class _QuietOnHangUp(ThreadingHTTPServer):
    """Connections cut by `close` (or by the client) are expected; anything else is still reported."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def _handler_for(arm: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = -1  # one write per response: headers and body split across packets stall on delayed ACKs

        def setup(self) -> None:
            super().setup()
            with arm._lock:
                arm._connections.append(self.connection)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            request = ServedRequest(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={key.lower(): value for key, value in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
            status, headers, body = arm.handle(request)
            payload = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            if payload:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-ms-request-id", str(uuid.uuid4()))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    return Handler


def _error(status: int, code: str, message: str, details: list[dict[str, Any]] | None = None) -> tuple[int, dict[str, str], Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return status, {}, {"error": error}


def _not_found(name: str) -> tuple[int, dict[str, str], Any]:
    return _error(404, "ResourceNotFound", f"The Resource 'Microsoft.Compute/virtualMachines/{name}' was not found.")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
