"""What every fake metadata service shares: a real HTTP/1.1 server on 127.0.0.1 (random port) served from a
daemon thread, a record of every request it got, and switches that break it on purpose."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

GARBAGE_BODY = b"\x00\xff<html>not metadata{"


class Breakage(enum.Enum):
    """How a broken fake answers every request (the request is still recorded)."""

    NONE = "none"
    SERVER_ERROR = "server-error"  # an HTTP 5xx status
    DROP_CONNECTION = "drop-connection"  # close the connection without any answer
    GARBAGE = "garbage"  # 200 with a body no metadata service would send


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServedRequest:
    """One request as the fake saw it; `headers` keys are lower-case."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    at: float


def text_reply(status: int, text: str, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, text.encode("utf-8"), {"Content-Type": "text/plain", **(headers or {})})


class FakeMetadataServer:
    """Base of the fakes. Subclasses implement `_answer(request) -> Reply`; they may override `_garbage(request)`.

    Usable as a context manager; `url` is the root (``http://127.0.0.1:PORT``) that replaces the real service's
    address, and the real paths follow it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified whenever the fake's state changes
        self._requests: list[ServedRequest] = []
        self._breakage = Breakage.NONE
        self._error_status = 500
        self._closing = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name=type(self).__name__, daemon=True
        )
        self._thread.start()

    # ---- what tests use ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[ServedRequest]:
        with self._lock:
            return list(self._requests)

    def request_count(self, path: str | None = None, method: str | None = None) -> int:
        """How many requests arrived (broken answers included), optionally only those for `path` / `method`."""
        with self._lock:
            return sum(
                1 for r in self._requests if (path is None or r.path == path) and (method is None or r.method == method)
            )

    def fail_with_status(self, status: int = 500) -> None:
        """Answer every request with `status` (a 5xx, say) until `repair()`."""
        self._break(Breakage.SERVER_ERROR, status)

    def drop_connections(self) -> None:
        """Close every connection without answering until `repair()`."""
        self._break(Breakage.DROP_CONNECTION)

    def answer_garbage(self) -> None:
        """Answer every request with 200 and a body that is not metadata until `repair()`."""
        self._break(Breakage.GARBAGE)

    def repair(self) -> None:
        self._break(Breakage.NONE)

    def close(self) -> None:
        """Stop serving; a later connection is refused. Long-polls still waiting return at once."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ---- for subclasses -------------------------------------------------------------------------------------

    def _answer(self, request: ServedRequest) -> Reply:
        raise NotImplementedError

    def _garbage(self, request: ServedRequest) -> Reply:
        return Reply(200, GARBAGE_BODY, {"Content-Type": "application/json"})

    def _state_changed(self) -> None:
        """Wake long-polls; call after changing state (the lock must not be held)."""
        with self._changed:
            self._changed.notify_all()

    def _wait_until(self, condition: Callable[[], bool], timeout: float) -> None:
        """Block a handler until `condition()` holds (checked under the lock), the timeout passes or the fake
        closes. Checks every 20 ms as well, so notices scheduled for a later time are seen when they come due."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._closing and not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(min(remaining, 0.02))

    @staticmethod
    def _visible(since: float | None) -> bool:
        return since is not None and since <= time.time()

    # ---- plumbing --------------------------------------------------------------------------------------------

    def _break(self, breakage: Breakage, status: int = 500) -> None:
        with self._lock:
            self._breakage = breakage
            self._error_status = status

    def _serve(self, request: ServedRequest) -> Reply | None:
        """The reply to send, or None to drop the connection."""
        with self._lock:
            self._requests.append(request)
            breakage, error_status = self._breakage, self._error_status
        if breakage is Breakage.DROP_CONNECTION:
            return None
        if breakage is Breakage.SERVER_ERROR:
            return text_reply(error_status, "fake metadata service is broken")
        if breakage is Breakage.GARBAGE:
            return self._garbage(request)
        return self._answer(request)


def _handler_for(fake: FakeMetadataServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real services and the clients use it
        wbufsize = -1  # one write per response: headers and body split across packets stall on delayed ACKs

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._dispatch()

        def do_PUT(self) -> None:  # noqa: N802
            self._dispatch()

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch()

        def _dispatch(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            request = ServedRequest(
                method=self.command,
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                headers={key.lower(): value for key, value in self.headers.items()},
                body=self.rfile.read(length) if length else b"",
                at=time.time(),
            )
            reply = fake._serve(request)
            if reply is None:
                self.close_connection = True
                return
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
