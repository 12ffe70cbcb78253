"""What a request with a large body and no token costs the team server: seconds and peak Python memory per request.

Calls the server's ASGI app in this process (no network), on a fresh SQLite store, with POSTs of a job-file body
of --megabytes to /api/v1/jobs and of a log chunk to the agent API, without a valid token, and prints the answer's
status, how many times the app asked for the body, the seconds per request and the peak memory Python allocated during one (tracemalloc). Run it on another
checkout through PYTHONPATH=<checkout>/src to compare code.

    .venv/bin/python benchmarks/unauthenticated_bodies.py --megabytes 7 --requests 20
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import tracemalloc

import anyio

from spotrun.server.app import create_app
from spotrun.state import Store


def request(app, path: str, body: bytes, authorization: bytes) -> tuple[int, int]:
    """The answer's status, and how many times the app asked for the body."""
    sent: list[dict] = []
    asked: list[int] = []
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"authorization", authorization)]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers,
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080), "root_path": ""}

    async def receive() -> dict:
        asked.append(1)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    anyio.run(app, scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start"), len(asked)


def measure(app, path: str, body: bytes, authorization: bytes, requests: int) -> dict:
    request(app, path, body, authorization)  # warm-up
    started = time.perf_counter()
    for _ in range(requests):
        status, reads = request(app, path, body, authorization)
    seconds = (time.perf_counter() - started) / requests
    tracemalloc.start()
    request(app, path, body, authorization)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"path": path, "status": status, "body_reads": reads, "ms_per_request": round(seconds * 1000, 2),
            "peak_mib": round(peak / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=float, default=7.0)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["SPOTRUN_HOME"] = home
        store = Store(f"sqlite:///{home}/state.db")
        app = create_app(store)
        size = int(args.megabytes * 2**20)
        spec = json.dumps({"spec": "run: 'true'\n#" + "x" * size}).encode()
        chunk = json.dumps({"offset": 0, "data": "y" * size}).encode()
        rows = [
            measure(app, "/api/v1/jobs", spec, b"Bearer spr_0123456789ab_forged", args.requests),
            measure(app, "/agent/v1/attempts/1/logs", chunk, b"Bearer forged", args.requests),
        ]
        store.dispose()
    print(json.dumps({"megabytes": args.megabytes, "requests": args.requests, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
