"""Schemathesis drives every operation of the server's OpenAPI spec with generated requests: none may answer 5xx,
and answers must match the spec. Kept small (a few examples per operation) so it stays fast."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance

from spotrun.server.app import create_app
from spotrun.server.users import add_user
from spotrun.state import Store

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@pytest.fixture
def admin_and_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, FastAPI]]:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield add_user(store, "root", time.time(), admin=True).token, create_app(store)
    store.dispose()


def test_no_operation_answers_5xx_or_off_spec(admin_and_app: tuple[str, FastAPI]) -> None:
    token, app = admin_and_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {token}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    user_facing = [operation for operation in operations if not operation.path.startswith("/agent/")]
    assert len(user_facing) == 16  # the API's 9 job and 5 user operations, /metrics and /healthz
    assert len(operations) - len(user_facing) >= 5  # and the agent API's (started, heartbeat, notice, logs, exit, ...)

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        call()


def test_agent_api_refuses_an_attempt_id_past_the_database_integers(admin_and_app: tuple[str, FastAPI]) -> None:
    with TestClient(admin_and_app[1], raise_server_exceptions=False) as client:
        response = client.post(f"/agent/v1/attempts/{2**63}/started", json={}, headers={"Authorization": "Bearer x"})
    assert response.status_code < 500
