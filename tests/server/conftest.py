"""Fixtures for the team server: an app on a fresh store (SQLite and PostgreSQL) with users alice, bob and root."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))  # the e2e harness: isolated SPOTRUN_HOME, clean-up
sys.path.insert(1, str(Path(__file__).parents[1]))  # vm_emulation, which the e2e harness imports

from server_world import Team  # noqa: E402

from spotrun.server.app import create_app  # noqa: E402
from spotrun.server.local_cloud import LocalCloudAccess  # noqa: E402
from spotrun.server.users import add_user  # noqa: E402
from spotrun.state import Store  # noqa: E402


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SPOTRUN_HOME of the test's own, and no server or database named: the CLI in embedded mode, on its defaults."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    for name in ("SPOTRUN_SERVER", "SPOTRUN_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


@pytest.fixture
def team(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    """The app on a fresh store; users alice and bob, and root (admin), each with a token. Its operator allows every
    user's jobs on the local cloud (SPOTRUN_SERVER_LOCAL_CLOUD=all), which the tests run on: the default is nobody's
    (test_server_local_cloud.py)."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    now = time.time()
    tokens = {
        "alice": add_user(store, "alice", now).token,
        "bob": add_user(store, "bob", now).token,
        "root": add_user(store, "root", now, admin=True).token,
    }
    with TestClient(create_app(store, local_cloud=LocalCloudAccess.ALL)) as client:
        yield Team(store, client, tokens)


@pytest.fixture
def served(team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`spotrun user`, `token` and `audit` with SPOTRUN_SERVER naming the team's app, and this machine's store another
    (SPOTRUN_HOME); the URLs the CLI asked for."""
    asked: list[str] = []

    def client() -> TestClient:
        test_client = TestClient(team.client.app)
        test_client.event_hooks = {"request": [lambda request: asked.append(str(request.url))]}
        return test_client

    monkeypatch.setattr("spotrun.cli.remote_accounts.new_http_client", client)
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "laptop"))
    monkeypatch.delenv("SPOTRUN_DATABASE_URL", raising=False)
    monkeypatch.setenv("SPOTRUN_SERVER", "http://testserver")
    return asked
