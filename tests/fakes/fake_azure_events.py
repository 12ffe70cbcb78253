"""A fake Azure Instance Metadata Service for Scheduled Events.

    GET  /metadata/scheduledevents?api-version=2020-07-01   -> {"DocumentIncarnation": n, "Events": [...]}
    POST /metadata/scheduledevents?api-version=2020-07-01   {"StartRequests": [{"EventId": "..."}]}

Both need the header `Metadata: true` and an api-version (else 400). An event looks like Azure's:
{"EventId", "EventStatus": "Scheduled"|"Started", "EventType": "Preempt"|"Reboot"|"Redeploy"|"Freeze"|
"Terminate", "ResourceType": "VirtualMachine", "Resources": [vm names], "NotBefore": RFC 1123 time or "",
"Description", "EventSource", "DurationInSeconds"}. An acknowledged (started) event has status "Started"
and a blank NotBefore.

    with FakeAzureEvents() as azure:
        env = {"SPOTRUN_AZURE_METADATA_URL": azure.url}
        event = azure.schedule_event("Preempt", resources=["vm-1"], not_before_in=30)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from email.utils import format_datetime
from typing import Any

from .metadata_server import FakeMetadataServer, Reply, ServedRequest

SCHEDULED_EVENTS_PATH = "/metadata/scheduledevents"
METADATA_HEADER = "Metadata"


def rfc1123(unix_seconds: float) -> str:
    """Azure's NotBefore format: Mon, 19 Sep 2016 18:29:47 GMT."""
    return format_datetime(datetime.fromtimestamp(unix_seconds, timezone.utc), usegmt=True)


@dataclass(frozen=True)
class ScheduledEvent:
    """An event as scheduled; `not_before` is in whole unix seconds, as the document can say it."""

    event_id: str
    event_type: str
    resources: tuple[str, ...]
    visible_from: float
    not_before: float
    status: str = "Scheduled"
    description: str = ""

    def document(self) -> dict[str, Any]:
        return {
            "EventId": self.event_id,
            "EventStatus": self.status,
            "EventType": self.event_type,
            "ResourceType": "VirtualMachine",
            "Resources": list(self.resources),
            "NotBefore": "" if self.status == "Started" else rfc1123(self.not_before),
            "Description": self.description,
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }


class FakeAzureEvents(FakeMetadataServer):
    """Azure Scheduled Events on 127.0.0.1. Times are unix seconds; `at=None` means now."""

    def __init__(self) -> None:
        self._events: list[ScheduledEvent] = []
        self._acknowledged: list[str] = []
        self._incarnation = 1
        super().__init__()

    def schedule_event(
        self,
        event_type: str = "Preempt",
        *,
        resources: Sequence[str] = ("vm-0",),
        at: float | None = None,
        not_before_in: float = 30.0,
        description: str = "",
    ) -> ScheduledEvent:
        """From `at` on, the document lists an event of `event_type` for `resources`, not before
        `not_before_in` seconds after `at`. Returns the event (its id and NotBefore)."""
        visible_from = time.time() if at is None else at
        event = ScheduledEvent(
            event_id=str(uuid.uuid4()).upper(),
            event_type=event_type,
            resources=tuple(resources),
            visible_from=visible_from,
            not_before=float(int(visible_from + not_before_in)),
            description=description or f"{event_type} scheduled by the fake",
        )
        with self._lock:
            self._events.append(event)
            self._incarnation += 1
        return event

    @property
    def acknowledged(self) -> list[str]:
        """EventIds that were POSTed as StartRequests, in order."""
        with self._lock:
            return list(self._acknowledged)

    def _answer(self, request: ServedRequest) -> Reply:
        if request.headers.get(METADATA_HEADER.lower()) != "true":
            return _error(400, "Bad request. Required metadata header not specified")
        if request.path != SCHEDULED_EVENTS_PATH:
            return _error(404, "Not found")
        if not request.query.get("api-version"):
            return _error(400, "Bad request. api-version was not specified in the request")
        if request.method == "GET":
            return self._document()
        if request.method == "POST":
            return self._start(request.body)
        return _error(405, "Method not allowed")

    def _document(self) -> Reply:
        with self._lock:
            visible = [event.document() for event in self._events if self._visible(event.visible_from)]
            body = {"DocumentIncarnation": self._incarnation, "Events": visible}
        return Reply(200, json.dumps(body).encode(), {"Content-Type": "application/json; charset=utf-8"})

    def _start(self, body: bytes) -> Reply:
        try:
            event_ids = [request["EventId"] for request in json.loads(body)["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return _error(400, "Bad request. Malformed StartRequests")
        with self._lock:
            self._acknowledged.extend(event_ids)
            self._events = [replace(e, status="Started") if e.event_id in event_ids else e for e in self._events]
            self._incarnation += 1
        return Reply(200, b"", {"Content-Type": "application/json; charset=utf-8"})


def _error(status: int, message: str) -> Reply:
    return Reply(status, json.dumps({"error": message}).encode(), {"Content-Type": "application/json; charset=utf-8"})
