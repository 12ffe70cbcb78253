"""Who may do what: tokens are required and stored hashed, a user reaches only their own jobs (another's answers
404 and nothing changes), an admin reaches all, and agent and user tokens are not interchangeable."""

from __future__ import annotations

import time

import pytest
from server_world import Team, place_attempt
from sqlalchemy import select

from spotrun.control import records
from spotrun.server.agent_api import ENDED_ATTEMPT_GRACE
from spotrun.server.users import InvalidUserName, add_user, check_user_name, create_token, revoke_token
from spotrun.state import Attempt, Event, Job
from spotrun.state.models import ApiToken


def snapshot(team: Team) -> tuple[list[tuple], list[tuple]]:
    with team.store.session() as session:
        jobs = [(j.id, j.state, j.cancel_requested, j.owner) for j in session.scalars(select(Job).order_by(Job.id))]
        events = [(e.id, e.kind) for e in session.scalars(select(Event).order_by(Event.id))]
    return jobs, events


@pytest.mark.parametrize("authorization", [None, "Bearer ", "Bearer spr_nothere_xyz", "Bearer not-a-token", "Basic x"])
def test_requests_without_a_valid_token_are_401(team: Team, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    for method, path in (("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs/1/cost")):
        response = team.client.request(method, path, headers=headers, json={"spec": "run: x"})
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_token_with_the_right_prefix_but_wrong_secret_is_refused(team: Team) -> None:
    prefix = team.tokens["alice"].rsplit("_", 1)[0]
    forged = {"Authorization": f"Bearer {prefix}_{'A' * 43}"}
    assert team.client.get("/api/v1/jobs", headers=forged).status_code == 401


def test_a_revoked_token_is_refused_and_a_new_one_works(team: Team) -> None:
    old_prefix = team.tokens["alice"].split("_")[1]
    assert revoke_token(team.store, old_prefix, time.time())
    assert not revoke_token(team.store, old_prefix, time.time())  # already revoked
    assert team.client.get("/api/v1/jobs", headers=team.as_user("alice")).status_code == 401
    team.tokens["alice"] = create_token(team.store, "alice", time.time()).token
    assert team.client.get("/api/v1/jobs", headers=team.as_user("alice")).status_code == 200


def test_tokens_are_stored_only_as_hashes(team: Team) -> None:
    with team.store.session() as session:
        stored = [(row.prefix, row.token_hash) for row in session.scalars(select(ApiToken))]
    assert len(stored) == 3
    for token in team.tokens.values():
        assert all(token not in text for row in stored for text in row)


def test_another_users_job_is_404_everywhere_and_nothing_changes(team: Team) -> None:
    job_id = team.launch("alice")
    place_attempt(team.store, job_id, "agent-token")
    before = snapshot(team)
    bob = team.as_user("bob")
    for method, path in (
        ("GET", ""), ("GET", "/events"), ("GET", "/logs"), ("GET", "/attempts/1/log"), ("GET", "/cost"),
        ("POST", "/cancel"), ("POST", "/preempt"),
    ):
        response = team.client.request(method, f"/api/v1/jobs/{job_id}{path}", headers=bob)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json() == {"detail": f"no job with id {job_id}"}  # the same as a job that does not exist
    assert team.client.get("/api/v1/jobs", headers=bob).json() == []
    assert snapshot(team) == before


def test_an_admin_sees_and_cancels_every_users_job(team: Team) -> None:
    alices, bobs = team.launch("alice"), team.launch("bob")
    root = team.as_user("root")
    listed = team.client.get("/api/v1/jobs", headers=root).json()
    assert [(row["id"], row["owner"]) for row in listed] == [(alices, "alice"), (bobs, "bob")]
    assert team.client.post(f"/api/v1/jobs/{bobs}/cancel", headers=root).status_code == 202
    with team.store.session() as session:
        assert session.get(Job, bobs).cancel_requested and not session.get(Job, alices).cancel_requested


def test_agent_tokens_and_user_tokens_do_not_cross(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-secret-token")
    as_agent = {"Authorization": "Bearer agent-secret-token"}
    assert team.client.get(f"/api/v1/jobs/{job_id}", headers=as_agent).status_code == 401
    assert team.client.post(f"/agent/v1/attempts/{attempt_id}/heartbeat", json={}, headers=team.as_user("alice")
                            ).status_code == 403
    assert team.client.post(f"/agent/v1/attempts/{attempt_id}/heartbeat", json={}, headers=as_agent).status_code == 200


def test_credentials_never_reach_events_or_logs(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-secret-token")
    agent = {"Authorization": "Bearer agent-secret-token"}
    team.client.post(f"/agent/v1/attempts/{attempt_id}/started", json={"address": "127.0.0.1"}, headers=agent)
    team.client.post(f"/agent/v1/attempts/{attempt_id}/logs", json={"offset": 0, "data": "step 1\n"}, headers=agent)
    team.client.post(f"/agent/v1/attempts/{attempt_id}/notice", json={"source": "test", "detail": "x"}, headers=agent)
    team.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=team.as_user("alice"))
    events = team.client.get(f"/api/v1/jobs/{job_id}/events", headers=team.as_user("alice")).text
    logs = team.client.get(f"/api/v1/jobs/{job_id}/logs", headers=team.as_user("alice")).text
    assert "step 1" in logs and "preemption notice" in events
    for credential in [*team.tokens.values(), "agent-secret-token"]:
        assert credential not in events and credential not in logs


def ended(team: Team, attempt_id: int, ago: float) -> None:
    with team.store.session() as session:
        records.end_attempt(session, session.get(Attempt, attempt_id), reason="lost", ended_at=time.time() - ago,
                            billed_seconds=60.0)


def test_an_ended_attempts_token_takes_no_reports_once_its_last_ones_are_past(team: Team) -> None:
    """The token is in the instance's user data, which the cloud shows after the instance is gone: every route took
    it for ever, writing events, log lines and checkpoint steps into the attempt (and its job) long ended."""
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-1", at=time.time() - 7200)
    ended(team, attempt_id, ago=ENDED_ATTEMPT_GRACE + 60)
    before = snapshot(team)
    agent, base = {"Authorization": "Bearer agent-1"}, f"/agent/v1/attempts/{attempt_id}"
    for path, body in (("/started", {}), ("/notice", {"source": "aws-imds"}), ("/exit", {"outcome": "succeeded"}),
                       ("/warning", {"source": "aws-imds", "kind": "rebalance"}), ("/logs", {"offset": 0, "data": "x"}),
                       ("/generation_exit", {"generation": 1, "exit_code": 0})):
        response = team.client.post(base + path, json=body, headers=agent)
        assert response.status_code == 410 and "attempt 1 of job 1 has ended" in response.text, (path, response.text)
    heartbeat = team.client.post(base + "/heartbeat", json={"checkpoint_step": 500}, headers=agent)
    assert heartbeat.status_code == 200 and heartbeat.json()["stop"] == "attempt 1 has ended"  # its agent stops
    assert heartbeat.json()["hold"] is True  # a standby stops where it waits: it restores nothing
    assert snapshot(team) == before
    with team.store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        assert (attempt.checkpoint_step, attempt.reported_outcome, attempt.log_bytes) == (None, None, 0)


def test_an_attempt_just_ended_takes_its_last_reports_but_no_start(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, "agent-1")
    ended(team, attempt_id, ago=0)
    agent, base = {"Authorization": "Bearer agent-1"}, f"/agent/v1/attempts/{attempt_id}"
    assert team.client.post(base + "/logs", json={"offset": 0, "data": "tail\n"}, headers=agent).status_code == 200
    assert team.client.post(base + "/exit", json={"outcome": "preempted"}, headers=agent).status_code == 200
    assert team.client.post(base + "/started", json={}, headers=agent).status_code == 410


def test_no_user_can_be_named_local_the_owner_of_the_jobs_run_without_a_server(team: Team) -> None:
    """`spotrun launch` without a server, on the server's store, owns its jobs as "local": a team user of that name
    listed and cancelled them."""
    with pytest.raises(InvalidUserName, match="reserved"):
        add_user(team.store, "local", time.time())


@pytest.mark.parametrize("name", ["Local", "LOCAL"])
def test_no_user_name_differs_from_local_only_in_case(name: str) -> None:
    """"Local" would pass for the owner of the jobs run without a server on every page that names an owner."""
    with pytest.raises(InvalidUserName, match="reserved"):
        check_user_name(name)


@pytest.mark.parametrize("name", ["spr_a_b", "SPR_team", "spr_"])
def test_no_user_name_reads_as_a_token(name: str) -> None:
    """Logs and refusals cut a token's secret off, `spr_<prefix>_...`: a user named so was cut there too."""
    with pytest.raises(InvalidUserName, match="reads as a token"):
        check_user_name(name)
    assert check_user_name("sprinter") == "sprinter"
