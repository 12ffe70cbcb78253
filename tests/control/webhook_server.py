"""A webhook receiver on 127.0.0.1 (a free port) in a thread: it keeps every JSON body posted to it and answers each
with the next status of its script (then 200)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookServer:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.statuses: list[int] = []  # the answers to the next posts, in order; 200 once they are used up
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    def url(self, path: str = "/hook/T000/B000/secret-part") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def events(self) -> list[str]:
        return [body["event"] for body in self.bodies]

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(server: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            status = server.statuses.pop(0) if server.statuses else 200
            if status == 200:
                server.bodies.append(body)
                server.paths.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
