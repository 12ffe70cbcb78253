"""A fake Google Compute Engine metadata server for the two keys that announce the end of an instance.

    GET /computeMetadata/v1/instance/preempted           "FALSE" until preempted, then "TRUE"
    GET /computeMetadata/v1/instance/maintenance-event   "NONE", "MIGRATE_ON_HOST_MAINTENANCE",
                                                         "TERMINATE_ON_HOST_MAINTENANCE"

A request needs the header `Metadata-Flavor: Google` (else 403); answers carry it and an ETag. Long-polls work
as on GCE: `?wait_for_change=true&timeout_sec=N[&last_etag=E]` returns once the value's ETag differs from E
(from the current one when E is not given) or after N seconds with the current value.

    with FakeGceMetadata() as gce:
        env = {"SPOTRUN_GCE_METADATA_URL": gce.url}
        gce.preempt()
"""

from __future__ import annotations

import hashlib
import time

from .metadata_server import GARBAGE_BODY, FakeMetadataServer, Reply, ServedRequest, text_reply

METADATA_PREFIX = "/computeMetadata/v1/"
PREEMPTED_KEY = "instance/preempted"
MAINTENANCE_EVENT_KEY = "instance/maintenance-event"
FLAVOR_HEADER = "Metadata-Flavor"
FLAVOR = "Google"
DEFAULT_WAIT_SECONDS = 60.0  # cap on a long-poll that gives no timeout_sec


def etag_of(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class FakeGceMetadata(FakeMetadataServer):
    """GCE metadata on 127.0.0.1. Times are unix seconds; `at=None` means now."""

    def __init__(self) -> None:
        # key -> [(unix time from which it holds, value)], in time order
        self._timelines: dict[str, list[tuple[float, str]]] = {
            PREEMPTED_KEY: [(0.0, "FALSE")],
            MAINTENANCE_EVENT_KEY: [(0.0, "NONE")],
        }
        self._send_flavor = True
        super().__init__()

    def preempt(self, *, at: float | None = None) -> float:
        """`preempted` turns "TRUE" at `at`; returns that time."""
        return self.set_value(PREEMPTED_KEY, "TRUE", at=at)

    def set_maintenance_event(self, value: str, *, at: float | None = None) -> float:
        """`maintenance-event` becomes `value` at `at`; returns that time."""
        return self.set_value(MAINTENANCE_EVENT_KEY, value, at=at)

    def set_value(self, key: str, value: str, *, at: float | None = None) -> float:
        """Any served key (`instance/preempted`, `instance/maintenance-event`) becomes `value` at `at`."""
        if key not in self._timelines:
            raise KeyError(f"the fake serves only {sorted(self._timelines)}, not {key!r}")
        since = time.time() if at is None else at
        with self._lock:
            timeline = self._timelines[key]
            timeline.append((since, value))
            timeline.sort(key=lambda entry: entry[0])
        self._state_changed()
        return since

    def omit_flavor_header(self, omit: bool = True) -> None:
        """Answer without `Metadata-Flavor: Google`, like something that is not the metadata server."""
        with self._lock:
            self._send_flavor = not omit

    def long_polls(self, key: str = PREEMPTED_KEY) -> int:
        """How many requests for `key` asked to wait for a change."""
        path = METADATA_PREFIX + key
        return sum(1 for r in self.requests if r.path == path and r.query.get("wait_for_change") == "true")

    def _current(self, key: str) -> str:
        now = time.time()
        return [value for since, value in self._timelines[key] if since <= now][-1]

    def _headers(self, value: str) -> dict[str, str]:
        headers = {"Content-Type": "application/text", "ETag": etag_of(value)}
        if self._send_flavor:
            headers[FLAVOR_HEADER] = FLAVOR
        return headers

    def _answer(self, request: ServedRequest) -> Reply:
        if request.headers.get(FLAVOR_HEADER.lower()) != FLAVOR:
            return text_reply(403, "Missing required header: Metadata-Flavor")
        key = request.path.removeprefix(METADATA_PREFIX)
        if request.method != "GET" or not request.path.startswith(METADATA_PREFIX) or key not in self._timelines:
            return text_reply(404, "Not Found")
        if request.query.get("wait_for_change") == "true":
            try:
                self._wait_for_change(key, request)
            except ValueError:
                return text_reply(400, "invalid timeout_sec")
        with self._lock:
            value = self._current(key)
            return Reply(200, value.encode(), self._headers(value))

    def _wait_for_change(self, key: str, request: ServedRequest) -> None:
        timeout = float(request.query.get("timeout_sec", DEFAULT_WAIT_SECONDS))
        with self._lock:
            start_etag = request.query.get("last_etag") or etag_of(self._current(key))
        self._wait_until(lambda: etag_of(self._current(key)) != start_etag, timeout)

    def _garbage(self, request: ServedRequest) -> Reply:
        headers = {"Content-Type": "application/text"}
        if self._send_flavor:
            headers[FLAVOR_HEADER] = FLAVOR
        return Reply(200, GARBAGE_BODY, headers)
