"""Fixtures for the agent's tests: a recording stand-in for the controller's agent API, and a way to run
`python -m spotrun.agent` against it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest

TOKEN = "test-token-s3cr3t"
ATTEMPT_ID = 41
PREFIX = f"/agent/v1/attempts/{ATTEMPT_ID}/"


@dataclass
class Request:
    endpoint: str
    body: dict[str, Any]
    authorization: str | None
    at: float


@dataclass
class RecordingController:
    """Records every agent API call; assembles /logs like the real server (a chunk at an offset already held
    is ignored). `fail_before[endpoint]` answers that many next calls with 503 without recording their effect;
    `lose_response[endpoint]` applies that many next calls but answers 500, as if the answer was lost;
    `force_status[endpoint]` records every call but answers with that status, without applying it. /logs answers
    the stored size, as the real server; a shipper's empty chunk asking for it is kept apart, in `log_probes`."""

    requests: list[Request] = field(default_factory=list)
    log_probes: list[Request] = field(default_factory=list)
    log: bytearray = field(default_factory=bytearray)
    log_gaps: list[int] = field(default_factory=list)
    fail_before: dict[str, int] = field(default_factory=dict)
    lose_response: dict[str, int] = field(default_factory=dict)
    force_status: dict[str, int] = field(default_factory=dict)
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)  # JSON answer per endpoint (default {})
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def of(self, endpoint: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.endpoint == endpoint]

    def log_text(self) -> str:
        with self.lock:
            return self.log.decode("utf-8")

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met in {timeout}s; requests: {[r.endpoint for r in self.requests]}")
            time.sleep(0.02)

    def handle(self, endpoint: str, body: dict[str, Any], authorization: str | None) -> int:
        with self.lock:
            if self.fail_before.get(endpoint, 0) > 0:
                self.fail_before[endpoint] -= 1
                return 503
            if endpoint == "logs" and body.get("data") == "":  # a shipper asking where the stored log ends
                self.log_probes.append(Request(endpoint, body, authorization, time.time()))
                return self.force_status.get(endpoint, 200)
            self.requests.append(Request(endpoint, body, authorization, time.time()))
            if endpoint in self.force_status:
                return self.force_status[endpoint]
            if endpoint == "logs":
                self._append_log(body["offset"], body["data"].encode("utf-8"))
            if self.lose_response.get(endpoint, 0) > 0:
                self.lose_response[endpoint] -= 1
                return 500
            return 200

    def _append_log(self, offset: int, data: bytes) -> None:
        if offset == len(self.log):
            self.log += data
        elif offset > len(self.log):
            self.log_gaps.append(offset)


def _handler_for(controller: RecordingController) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(json.loads(self.rfile.read(length) or b"{}"))

        def do_GET(self) -> None:  # noqa: N802
            self._answer({})

        def _answer(self, body: dict[str, Any]) -> None:
            if not self.path.startswith(PREFIX):
                status = 404
            else:
                status = controller.handle(self.path[len(PREFIX) :], body, self.headers.get("Authorization"))
            endpoint = self.path[len(PREFIX) :]
            reply = controller.replies.get(endpoint, {"size": len(controller.log)} if endpoint == "logs" else {})
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ControllerServer:
    def __init__(self, controller: RecordingController, port: int = 0) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(controller))
        self._server.daemon_threads = True
        controller.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # shutdown() waits for serve_forever to look at its flag, every poll_interval (0.5 s by default)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def controller() -> Iterator[RecordingController]:
    recorder = RecordingController()
    server = ControllerServer(recorder)
    yield recorder
    server.close()


@pytest.fixture
def start_server() -> Iterator[Callable[[RecordingController, int], ControllerServer]]:
    servers: list[ControllerServer] = []

    def start(recorder: RecordingController, port: int) -> ControllerServer:
        servers.append(ControllerServer(recorder, port))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@dataclass
class AgentRun:
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    disk: Path
    store: Path

    def wait(self, timeout: float = 20.0) -> int:
        return self.process.wait(timeout)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()


def agent_config(controller_url: str, store: Path, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "controller_url": controller_url,
        "token": TOKEN,
        "job_id": 7,
        "attempt_id": ATTEMPT_ID,
        "attempt_number": 2,
        "run": "true",
        "checkpoint_dir": "ckpts",
        "checkpoint_store": str(store),
        "heartbeat_interval": 0.2,
        "sync_interval": 0.5,
        "notice_poll_interval": 0.1,
        "notice_grace": 5.0,
        "sync_margin": 0.5,
    }
    config.update(overrides)
    return config


@pytest.fixture
def run_agent(tmp_path: Path) -> Iterator[Callable[..., AgentRun]]:
    """Start `python -m spotrun.agent` with a config built from agent_config(controller_url, store, **overrides)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(controller_url: str, extra_env: dict[str, str] | None = None, **overrides: Any) -> AgentRun:
        disk, store = tmp_path / "disk", tmp_path / "store"
        disk.mkdir(exist_ok=True)
        env = {**os.environ, "SPOTRUN_INSTANCE_DISK": str(disk), **(extra_env or {})}
        env["SPOTRUN_AGENT_CONFIG"] = json.dumps(agent_config(controller_url, store, **overrides))
        stdout_path, stderr_path = tmp_path / "agent.out", tmp_path / "agent.err"
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen([sys.executable, "-m", "spotrun.agent"], env=env, stdout=out, stderr=err)
        started.append(process)
        return AgentRun(process, stdout_path, stderr_path, disk, store)

    yield start
    for process in started:
        if process.poll() is None:
            kill_with_its_commands(process)


def kill_with_its_commands(agent: subprocess.Popen[bytes]) -> None:
    """An agent a test left running, and what it started: its commands run in process groups of their own, and a
    trainer waiting for a SIGTERM outlived the agent's SIGKILL (found alive an hour after a failed run)."""
    try:
        commands = psutil.Process(agent.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        commands = []
    agent.kill()
    agent.wait()
    for command in commands:
        with contextlib.suppress(psutil.NoSuchProcess):
            command.kill()
