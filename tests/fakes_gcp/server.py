"""A real HTTP server on 127.0.0.1 (random port, in a thread) speaking the Compute Engine v1 REST paths that
spotrun's GCP provider uses, over the state of a `FakeCloud`."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .cloud import ApiError, FakeCloud, RecordedRequest, scoped
from .filters import InvalidFilter, compile_filter

Handler = Callable[..., Any]
_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_Z = _P + r"/zones/(?P<zone>[^/]+)"


class FakeCompute:
    """`with FakeCompute() as compute:` serves `compute.cloud` at `compute.url` (an api_endpoint for the SDK)."""

    def __init__(self, cloud: FakeCloud | None = None) -> None:
        self.cloud = cloud or FakeCloud()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            ("GET", re.compile(_P + r"/zones"), self._zones),
            ("GET", re.compile(_P + r"/aggregated/machineTypes"), self._aggregated_machine_types),
            ("GET", re.compile(_P + r"/aggregated/acceleratorTypes"), self._aggregated_accelerator_types),
            ("GET", re.compile(_Z + r"/machineTypes"), self._machine_types),
            ("GET", re.compile(_P + r"/aggregated/instances"), self._aggregated_instances),
            ("POST", re.compile(_Z + r"/instances"), self._insert),
            ("GET", re.compile(_Z + r"/instances"), self._list_instances),
            ("GET", re.compile(_Z + r"/instances/(?P<name>[^/]+)"), self._get_instance),
            ("DELETE", re.compile(_Z + r"/instances/(?P<name>[^/]+)"), self._delete_instance),
            ("POST", re.compile(_Z + r"/instances/(?P<name>[^/]+)/simulateMaintenanceEvent"), self._simulate_maintenance),
            ("GET", re.compile(_Z + r"/operations"), self._list_operations),
            ("GET", re.compile(_Z + r"/operations/(?P<operation>[^/]+)"), self._look_at_operation),
            ("POST", re.compile(_Z + r"/operations/(?P<operation>[^/]+)/wait"), self._look_at_operation),
        ]
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-compute", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeCompute:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- dispatch --------------------------------------------------------------------------------------

    def handle(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(target)
        query = dict(parse_qsl(parts.query))
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return 400, ApiError(400, "parseError", "Parse Error").body()
        try:
            self.cloud.record(RecordedRequest(method, parts.path, query, payload))
            for route_method, pattern, handler in self._routes:
                match = pattern.fullmatch(parts.path)
                if match and route_method == method:
                    self.cloud.check_project(match["project"])
                    return 200, handler(query=query, body=payload, **match.groupdict())
            return 404, ApiError(404, "notFound", f"no such method: {method} {parts.path}").body()
        except ApiError as error:
            return error.status, error.body()
        except InvalidFilter as error:
            return 400, ApiError(400, "invalid", str(error)).body()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = -1  # one write per response: headers and body split across packets stall on delayed ACKs

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, reply = fake.handle(self.command, self.path, self.rfile.read(length))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                pass

        return _Handler

    # -- paging ----------------------------------------------------------------------------------------

    def _page(self, items: list[Any], query: dict[str, str]) -> tuple[list[Any], str | None]:
        size = min(self.cloud.page_size, int(query.get("maxResults", 500)))
        start = int(query.get("pageToken") or 0)
        following = start + size
        return items[start:following], (str(following) if following < len(items) else None)

    def _list(self, kind: str, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        matches = compile_filter(query.get("filter"))
        page, token = self._page([item for item in items if matches(item)], query)
        reply: dict[str, Any] = {"kind": kind, "items": page}
        if token:
            reply["nextPageToken"] = token
        return reply

    def _aggregated(self, kind: str, key: str, scopes: list[tuple[str, list[dict[str, Any]]]], query: dict[str, str]) -> dict[str, Any]:
        matches = compile_filter(query.get("filter"))
        page, token = self._page(scopes, query)
        reply: dict[str, Any] = {
            "kind": kind,
            "items": scoped(((scope, [item for item in items if matches(item)]) for scope, items in page), key),
        }
        if token:
            reply["nextPageToken"] = token
        return reply

    # -- methods ---------------------------------------------------------------------------------------

    def _zones(self, query: dict[str, str], **_: Any) -> dict[str, Any]:
        return self._list("compute#zoneList", self.cloud.zone_resources(), query)

    def _machine_types(self, zone: str, query: dict[str, str], **_: Any) -> dict[str, Any]:
        self.cloud.check_zone(zone)
        return self._list("compute#machineTypeList", self.cloud.machine_type_resources(zone), query)

    def _aggregated_machine_types(self, query: dict[str, str], **_: Any) -> dict[str, Any]:
        scopes = [(f"zones/{zone}", self.cloud.machine_type_resources(zone)) for zone in sorted(self.cloud.zones)]
        return self._aggregated("compute#machineTypeAggregatedList", "machineTypes", scopes, query)

    def _aggregated_accelerator_types(self, query: dict[str, str], **_: Any) -> dict[str, Any]:
        scopes = [(f"zones/{zone}", self.cloud.accelerator_type_resources(zone)) for zone in sorted(self.cloud.zones)]
        return self._aggregated("compute#acceleratorTypeAggregatedList", "acceleratorTypes", scopes, query)

    def _aggregated_instances(self, query: dict[str, str], **_: Any) -> dict[str, Any]:
        scopes = [(f"zones/{zone}", self.cloud.list_instances(zone)) for zone in sorted(self.cloud.zones)]
        return self._aggregated("compute#instanceAggregatedList", "instances", scopes, query)

    def _insert(self, zone: str, query: dict[str, str], body: dict[str, Any] | None, **_: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "required", "Required field 'resource' not specified")
        return self.cloud.insert(zone, body, query.get("requestId"))

    def _list_instances(self, zone: str, query: dict[str, str], **_: Any) -> dict[str, Any]:
        self.cloud.check_zone(zone)
        return self._list("compute#instanceList", self.cloud.list_instances(zone), query)

    def _get_instance(self, zone: str, name: str, **_: Any) -> dict[str, Any]:
        return self.cloud.get_instance(zone, name)

    def _delete_instance(self, zone: str, name: str, **_: Any) -> dict[str, Any]:
        return self.cloud.delete(zone, name)

    def _simulate_maintenance(self, zone: str, name: str, **_: Any) -> dict[str, Any]:
        return self.cloud.simulate_maintenance(zone, name)

    def _list_operations(self, zone: str, query: dict[str, str], **_: Any) -> dict[str, Any]:
        return self._list("compute#operationList", self.cloud.list_operations(zone), query)

    def _look_at_operation(self, zone: str, operation: str, **_: Any) -> dict[str, Any]:
        return self.cloud.look_at_operation(zone, operation)
