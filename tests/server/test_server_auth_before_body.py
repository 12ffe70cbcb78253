"""A request with a body and no valid token is refused before its body is read: FastAPI reads and parses a body
before the route's token check runs, so up to 8 MiB per request were read and parsed for anyone."""

from __future__ import annotations

import json
import time

import anyio
import pytest
from server_world import TINY_JOB, Team

from spotrun.control.tokens import attempt_token, controller_secret, hash_token
from spotrun.server import auth, early_auth
from spotrun.server.app import create_app
from spotrun.server.local_cloud import LocalCloudAccess
from spotrun.server.users import authenticate as real_authenticate
from spotrun.server.users import revoke_token
from spotrun.state import Attempt, Job

BODY = json.dumps({"spec": "run: 'true'\n" + "#" * 7_000_000}).encode()


def call(app, path: str, authorization: str | None, body: bytes = BODY, method: str = "POST") -> tuple[int, dict, int]:
    """The app's status and JSON answer for a `method` request of `body`, and how many times it asked for the body."""
    asked, sent = [], []
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers,
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080), "root_path": ""}

    async def receive():
        asked.append(1)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    anyio.run(app, scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(answer or b"null"), len(asked)


@pytest.mark.parametrize("authorization", [None, "Bearer spr_0123456789ab_forged", "Basic YWxpY2U6cHc=", "Bearer "])
def test_the_user_api_refuses_a_body_without_a_valid_token_unread(team: Team, authorization):
    status, answer, reads = call(create_app(team.store), "/api/v1/jobs", authorization)

    assert (status, answer, reads) == (401, {"detail": "a valid API token is required"}, 0)


def test_a_revoked_token_is_refused_unread_too(team: Team):
    token = team.tokens["bob"]
    assert revoke_token(team.store, token, time.time())

    assert call(create_app(team.store), "/api/v1/jobs", f"Bearer {token}")[::2] == (401, 0)


def test_a_valid_token_reads_the_body_and_is_checked_once(team: Team, monkeypatch):
    checks = []

    def counted(session, token):
        checks.append(token)
        return real_authenticate(session, token)

    monkeypatch.setattr(early_auth, "authenticate", counted)
    monkeypatch.setattr(auth, "authenticate", counted)
    body = json.dumps({"spec": TINY_JOB, "source": "j.yaml"}).encode()

    status, answer, reads = call(create_app(team.store, local_cloud=LocalCloudAccess.ALL), "/api/v1/jobs",
                                 f"Bearer {team.tokens['alice']}", body)

    assert status == 201 and answer["owner"] == "alice" and reads >= 1
    assert len(checks) == 1


def seeded_attempt(team: Team) -> tuple[int, str]:
    with team.store.session() as session:
        job = Job(name="j", owner="alice", spec={"name": "j", "run": "true"}, state="RUNNING", created_at=1.0,
                  updated_at=1.0)
        session.add(job)
        session.flush()
        token = attempt_token(controller_secret(session), "ct-early")
        attempt = Attempt(job_id=job.id, number=1, state="running", provider="local", zone="local-a", market="spot",
                          instance_type="local.cpu", price_per_hour=0.1, on_demand_price_per_hour=0.3,
                          client_token="ct-early", token_hash=hash_token(token), instance_id="li-1", created_at=1.0)
        session.add(attempt)
        session.flush()
        return attempt.id, token


@pytest.mark.parametrize("path_id", ["own", "other", "0", str(2**63)])
def test_the_agent_api_refuses_a_body_without_the_attempts_token_unread(team: Team, path_id):
    attempt_id, token = seeded_attempt(team)
    path_id = {"own": str(attempt_id), "other": str(attempt_id + 1)}.get(path_id, path_id)
    authorization = f"Bearer {team.tokens['alice']}" if path_id == str(attempt_id) else f"Bearer {token}"

    status, answer, reads = call(create_app(team.store), f"/agent/v1/attempts/{path_id}/logs", authorization)

    assert (status, answer, reads) == (403, {"detail": "this token is not valid for this attempt"}, 0)


def test_the_attempts_token_reads_the_body(team: Team):
    attempt_id, token = seeded_attempt(team)
    body = json.dumps({"offset": 0, "data": "hello\n"}).encode()

    status, answer, reads = call(create_app(team.store), f"/agent/v1/attempts/{attempt_id}/logs", f"Bearer {token}",
                                 body)

    assert (status, answer["size"]) == (200, 6) and reads >= 1


def test_a_request_without_a_body_goes_to_the_route_as_before(team: Team):
    response = team.client.get("/api/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert team.client.get("/healthz").status_code == 200


@pytest.mark.parametrize("path", ["/api/v1/jobs/1/cancel", "/api/v1/users/bob/tokens", "/api/v1/tokens/abc/revoke"])
def test_a_body_to_a_route_that_takes_none_is_refused_for_its_token_first_unread(team: Team, path: str):
    """Such a route refuses any body (422), but only once it has been read: without a valid token, it is not."""
    status, answer, reads = call(create_app(team.store), path, None, b'{"dry_run": true}')

    assert (status, answer, reads) == (401, {"detail": "a valid API token is required"}, 0)


def test_a_body_to_the_agents_route_that_takes_none_is_refused_for_its_token_first_unread(team: Team):
    attempt_id, _ = seeded_attempt(team)

    status, answer, reads = call(create_app(team.store), f"/agent/v1/attempts/{attempt_id}/job",
                                 f"Bearer {team.tokens['alice']}", b'{"dry_run": true}', method="GET")

    assert (status, answer, reads) == (403, {"detail": "this token is not valid for this attempt"}, 0)
