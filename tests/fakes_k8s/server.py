"""A real HTTP server on 127.0.0.1 (random port, in a thread) speaking the core/v1 REST paths of a Kubernetes API
server over a `FakeCluster`, with bearer-token auth and Status error replies, so the official client works unchanged."""

from __future__ import annotations

import json
import re
import sys
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .cluster import ApiError, FakeCluster

_NS = r"/api/v1/namespaces/(?P<namespace>[^/]+)/"
_OBJECT = _NS + r"(?P<kind>pods|secrets)/(?P<name>[^/]+)"
MERGE_PATCH = "application/merge-patch+json"


class FakeKubernetes:
    """`with FakeKubernetes() as k8s:` serves `k8s.cluster` at `k8s.url` to clients sending `k8s.token`."""

    def __init__(self, cluster: FakeCluster | None = None, token: str | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        self.token = token or f"fake-k8s-{uuid.uuid4().hex}"
        self._unlistable: set[tuple[str, str | None]] = set()  # (resource, namespace) the token may not list
        c = self.cluster
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Any]]] = [
            ("GET", re.compile(r"/api/v1/(?P<kind>nodes)"), self._list),
            ("GET", re.compile(r"/api/v1/(?P<kind>nodes)/(?P<name>[^/]+)"), lambda kind, name, **_: c.read(kind, "", name)),
            ("GET", re.compile(_NS + r"(?P<kind>pods|secrets|events)"), self._list),
            ("POST", re.compile(_NS + r"pods"), lambda namespace, body, **_: (201, c.create_pod(namespace, body))),
            ("POST", re.compile(_NS + r"secrets"), lambda namespace, body, **_: (201, c.create_secret(namespace, body))),
            ("GET", re.compile(_OBJECT), lambda kind, namespace, name, **_: c.read(kind, namespace, name)),
            ("DELETE", re.compile(_OBJECT), self._delete),
            ("PATCH", re.compile(_OBJECT), self._patch),
            ("POST", re.compile(_NS + r"pods/(?P<name>[^/]+)/eviction"), self._evict),
            ("GET", re.compile(_NS + r"pods/(?P<name>[^/]+)/log"), self._log),
        ]
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-k8s-api", daemon=True)
        self._thread.start()
        self.cluster.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def close(self) -> None:
        """Stop serving, stop the cluster's loop and kill every running container."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self.cluster.close()

    def __enter__(self) -> FakeKubernetes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, method: str, target: str, headers: Any, raw: bytes) -> tuple[int, Any]:
        parts, content_type = urlsplit(target), (headers.get("Content-Type") or "").split(";")[0].strip()
        query = dict(parse_qsl(parts.query))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.cluster.record(method, target, content_type, body)
        try:
            if headers.get("Authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if isinstance(body, str) or (method in ("POST", "PATCH") and not isinstance(body, dict)):
                raise ApiError(400, "BadRequest", "the request body is not a JSON object")
            for route_method, pattern, handler in self._routes:
                match = pattern.fullmatch(parts.path)
                if match and route_method == method:
                    reply = handler(query=query, body=body, content_type=content_type, **match.groupdict())
                    return reply if isinstance(reply, tuple) else (200, reply)
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except ApiError as error:
            return error.code, error.status()
        except Exception as error:  # noqa: BLE001 (a bug of the fake: answer as an API server would, and say what)
            return 500, ApiError(500, "InternalError", f"the fake failed: {error!r}").status()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = -1  # one write per response: headers and body split across packets stall on delayed ACKs

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, reply = fake.handle(self.command, self.path, self.headers, self.rfile.read(length))
                text = isinstance(reply, str)
                data = (reply if text else json.dumps(reply)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                pass

        return _Handler

    def forbid_list(self, resource: str, namespace: str | None = None) -> None:
        """RBAC: the token may not list `resource` in `namespace` (None: cluster-wide); the API server answers 403."""
        self._unlistable.add((resource, namespace))

    def _list(self, kind: str, query: dict[str, str], namespace: str | None = None, **_: Any) -> dict[str, Any]:
        if (kind, namespace) in self._unlistable:
            where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            user = "system:serviceaccount:spotrun:spotrun"
            raise ApiError(403, "Forbidden", f'{kind} is forbidden: User "{user}" cannot list resource "{kind}" in API '
                           f'group "" {where}', kind=kind)
        return self.cluster.list_objects(kind, namespace, query.get("labelSelector"), query.get("fieldSelector"))

    @staticmethod
    def _grace(query: dict[str, str], options: Any) -> int | None:
        """gracePeriodSeconds from the DeleteOptions body, else from the query."""
        grace = (options or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        return None if grace is None else int(grace)

    def _delete(self, kind: str, namespace: str, name: str, query: dict[str, str], body: Any, **_: Any) -> Any:
        if kind == "secrets":
            return self.cluster.delete_secret(namespace, name)
        return self.cluster.delete_pod(namespace, name, self._grace(query, body))

    def _patch(self, kind: str, namespace: str, name: str, body: Any, content_type: str, **_: Any) -> Any:
        if content_type != MERGE_PATCH:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                           f"accepted media types include: {MERGE_PATCH} (the fake's only one)")
        return self.cluster.patch(kind, namespace, name, body)

    def _evict(self, namespace: str, name: str, query: dict[str, str], body: Any, **_: Any) -> Any:
        return 201, self.cluster.evict_pod(namespace, name, self._grace(query, (body or {}).get("deleteOptions")))

    def _log(self, namespace: str, name: str, query: dict[str, str], **_: Any) -> tuple[int, str]:
        self.cluster.read("pods", namespace, name)
        text = self.cluster.runner.log_of(namespace, name, query.get("container"))
        if "tailLines" in query:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[max(len(lines) - int(query["tailLines"]), 0):])
        return 200, text


class _QuietServer(ThreadingHTTPServer):
    """A client that drops its kept-alive connection (the client's pool at exit) is no error worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
