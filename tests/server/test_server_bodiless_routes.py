"""A route that takes no body refuses one, 422 saying so, before it does anything: FastAPI ignores a body that no
parameter reads, so `POST /jobs/3/cancel` with `{"dry_run": true}` cancelled job 3, and a token was revoked or made
all the same. An empty body is no body: the CLI and the dashboard send none."""

from __future__ import annotations

import json
import re

import pytest
from server_world import Team, place_attempt
from sqlalchemy import select

from spotrun.state import Attempt, Event, Job
from spotrun.state.models import ApiToken

AGENT_TOKEN = "bodiless-routes-agent-token"
BODIES = [json.dumps({"dry_run": True}).encode(), b"{bad", b"x", b"{}"]


def bodiless_operations(team: Team) -> list[tuple[str, str]]:
    """(method, path) of every operation of the user and agent APIs that takes no body, read from the OpenAPI spec."""
    spec = team.client.get("/openapi.json").json()
    return [
        (method.upper(), path)
        for path, operations in spec["paths"].items() if path.startswith(("/api/v1/", "/agent/v1/"))
        for method, operation in operations.items() if "requestBody" not in operation
    ]


def stored(team: Team) -> tuple[list[tuple], ...]:
    """Jobs, attempts, tokens and events, as rows to compare before and after."""
    with team.store.session() as session:
        jobs = [(j.id, j.state, j.updated_at) for j in session.scalars(select(Job).order_by(Job.id))]
        attempts = [(a.id, a.state, a.ended_at) for a in session.scalars(select(Attempt).order_by(Attempt.id))]
        tokens = [(t.prefix, t.revoked_at) for t in session.scalars(select(ApiToken).order_by(ApiToken.id))]
        events = [(e.id, e.kind) for e in session.scalars(select(Event).order_by(Event.id))]
    return jobs, attempts, tokens, events


@pytest.fixture
def running(team: Team) -> dict[str, str]:
    """A job of alice's with a running attempt: the values of every path parameter the APIs have."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, AGENT_TOKEN)
    prefix = team.tokens["alice"].split("_")[1]
    return {"job_id": str(job_id), "number": "1", "name": "alice", "prefix": prefix, "attempt_id": str(attempt_id)}


def test_every_route_that_takes_no_body_refuses_one_and_changes_nothing(team: Team, running: dict[str, str]) -> None:
    operations = bodiless_operations(team)
    assert ("POST", "/api/v1/jobs/{job_id}/cancel") in operations
    assert ("POST", "/api/v1/users/{name}/tokens") in operations
    assert ("POST", "/api/v1/tokens/{prefix}/revoke") in operations
    assert ("GET", "/agent/v1/attempts/{attempt_id}/job") in operations
    before = stored(team)

    for method, template in operations:
        path = re.sub(r"\{(\w+)\}", lambda name: running[name.group(1)], template)
        token = AGENT_TOKEN if path.startswith("/agent/") else team.tokens["alice"]
        for body in BODIES:
            response = team.client.request(method, path, content=body, params={"follow": "false"},
                                           headers={"Authorization": f"Bearer {token}",
                                                    "Content-Type": "application/json"})
            assert response.status_code == 422, (method, path, body, response.text)
            [problem] = response.json()["detail"]
            assert problem["loc"] == ["body"] and problem["type"] == "body_not_allowed"
            assert f"{method} {path} takes no body" in problem["msg"] and "nothing was done" in problem["msg"]
            assert body.decode() not in problem["msg"]

    assert stored(team) == before


def test_the_openapi_spec_lists_the_refusal_of_each(team: Team) -> None:
    spec = team.client.get("/openapi.json").json()
    for method, path in bodiless_operations(team):
        assert "422" in spec["paths"][path][method.lower()]["responses"], (method, path)


@pytest.mark.parametrize("empty", [{"content": b""}, {"content": iter([b""])}, {}],
                         ids=["content-length-0", "chunked-empty", "none"])
def test_an_empty_body_is_no_body(team: Team, running: dict[str, str], empty: dict) -> None:
    headers = team.as_user("alice")
    cancelled = team.client.post(f"/api/v1/jobs/{running['job_id']}/cancel", headers=headers, **empty)
    assert cancelled.status_code == 202, cancelled.text
    made = team.client.post("/api/v1/users/alice/tokens", headers=headers, **empty)
    assert made.status_code == 201, made.text
    revoked = team.client.post(f"/api/v1/tokens/{made.json()['prefix']}/revoke", headers=headers, **empty)
    assert revoked.status_code == 200, revoked.text


def test_a_route_that_takes_a_body_still_takes_it(team: Team, running: dict[str, str]) -> None:
    """Preempt's body is optional: none, or `{}`, is taken; an unknown field in it is refused, naming it."""
    headers = team.as_user("alice")
    path = f"/api/v1/jobs/{running['job_id']}/preempt"
    assert team.client.post(path, headers=headers, json={"notice_seconds": 5, "dry": 1}).json()["detail"][0]["loc"] == [
        "body", "dry"]
    assert team.client.post(path, headers=headers, json={}).status_code != 422
