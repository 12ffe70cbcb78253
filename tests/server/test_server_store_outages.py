"""A request the store cannot serve for the moment is a 503 with Retry-After that says so, not a bare 500: here
SQLite's write lock held by another process past the busy timeout (a real lock, a short timeout). Reads go on (WAL);
the agent's retried report is then heard; a bug is still a 500."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from server_world import place_attempt

from spotrun.server.app import create_app
from spotrun.server.local_cloud import LocalCloudAccess
from spotrun.server.store_outages import STORE_UNAVAILABLE
from spotrun.server.users import add_user
from spotrun.state import Attempt

AGENT_TOKEN = "agent-token-of-the-test"


def test_a_locked_store_is_a_503_to_users_and_agents_and_reads_go_on(impatient_sqlite, tmp_path, monkeypatch):
    impatient_store = impatient_sqlite.store
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    token = add_user(impatient_store, "alice", time.time()).token
    user = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(impatient_store, local_cloud=LocalCloudAccess.ALL)) as client:
        launched = client.post("/api/v1/jobs", json={"spec": "run: 'true'\nresources: {cloud: local}"}, headers=user)
        job_id = launched.json()["id"]
        attempt_id = place_attempt(impatient_store, job_id, AGENT_TOKEN)
        agent = {"Authorization": f"Bearer {AGENT_TOKEN}"}
        with impatient_sqlite.write_lock_held():
            cancel = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=user)
            beat = client.post(f"/agent/v1/attempts/{attempt_id}/heartbeat", json={}, headers=agent)
            listed = client.get("/api/v1/jobs", headers=user)
        for refused in (cancel, beat):
            assert refused.status_code == 503, refused.text
            assert refused.json() == {"detail": STORE_UNAVAILABLE}
            assert refused.headers["retry-after"] == "2"
        assert listed.status_code == 200 and [row["id"] for row in listed.json()] == [job_id]
        with impatient_store.session() as session:
            assert session.get(Attempt, attempt_id).last_heartbeat_at is None  # nothing half-written
        assert client.post(f"/agent/v1/attempts/{attempt_id}/heartbeat", json={}, headers=agent).status_code == 200
        with impatient_store.session() as session:
            assert session.get(Attempt, attempt_id).last_heartbeat_at is not None


def test_a_bug_is_still_a_500(impatient_sqlite, tmp_path, monkeypatch):
    impatient_store = impatient_sqlite.store
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    token = add_user(impatient_store, "alice", time.time()).token
    from spotrun.control import jobs

    def broken(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(jobs, "list_jobs", broken)
    with TestClient(create_app(impatient_store), raise_server_exceptions=False) as client:
        assert client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 500
