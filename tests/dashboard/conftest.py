"""Fixtures for the dashboard: a store with alice's and bob's jobs, the server on a free port, headless Chromium."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from dashboard_world import (  # noqa: E402
    CHROMIUM_ARGS, INSTALL_HINT, Dashboard, LiveServer, chromium_path, seed_preempted_job, seed_running_job,
)

from spotrun.server.app import create_app  # noqa: E402
from spotrun.server.users import add_user  # noqa: E402
from spotrun.state import Store  # noqa: E402


@pytest.fixture
def dashboard(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dashboard]:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))  # attempt logs live here
    store = Store(sqlite_url)
    now = time.time()
    tokens = {name: add_user(store, name, now).token for name in ("alice", "bob")}
    finished = seed_preempted_job(store, "alice", submitted_at=now - 4000)
    running = seed_running_job(store, "alice", "live-bert", now)
    bobs = seed_running_job(store, "bob", "bobs-secret-job", now)
    try:
        with LiveServer(create_app(store)) as server:
            yield Dashboard(server.url, store, tokens, finished, running, bobs)
    finally:
        store.dispose()


def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail where the browser is required (SPOTRUN_REQUIRE_BROWSER=1, e.g. in CI)."""
    message = f"{reason}; to install: {INSTALL_HINT}"
    if os.environ.get("SPOTRUN_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium through Playwright; a precise skip when either is missing or will not start. One for
    the module: Playwright's sync API keeps an asyncio loop running in this thread until it is stopped, and a test
    process's later TestClients (anyio) then fail ("Already running asyncio in this thread"). Each test opens a
    context of its own, closed after it by `_own_contexts`."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as error:
        _unavailable(f"Playwright for Python is not installed ({error})")
    executable = chromium_path()
    if executable is None:
        _unavailable("no Chromium at /usr/bin/chromium (or SPOTRUN_CHROMIUM) nor on PATH")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, timeout=20_000)
        except Error as error:
            _unavailable(f"Chromium at {executable} did not start: {str(error).splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture(autouse=True)
def _own_contexts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Closes the browser contexts a test left open, whose pages would go on polling, and would share the browser with
    the next test."""
    if "browser" not in request.fixturenames:
        yield
        return
    chromium = request.getfixturevalue("browser")
    yield
    for context in chromium.contexts:
        context.close()
