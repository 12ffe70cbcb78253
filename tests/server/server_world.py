"""Shared helpers of the team-server tests: the app on a store with users, and attempts placed by hand."""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi.testclient import TestClient
from sqlalchemy import select

from spotrun.control.tokens import hash_token
from spotrun.state import Attempt, Event, Store
from spotrun.state.models import ApiToken, User

TINY_JOB = """
name: tiny
run: "true"
resources: {cloud: local, instance_type: local.cpu}
"""


@dataclass
class Team:
    store: Store
    client: TestClient
    tokens: dict[str, str]

    def as_user(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def launch(self, name: str, text: str = TINY_JOB) -> int:
        response = self.client.post("/api/v1/jobs", json={"spec": text}, headers=self.as_user(name))
        assert response.status_code == 201, response.text
        return response.json()["id"]


def stored(team: Team) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Users, tokens (with their hashes and revocation) and events, as rows to compare before and after."""
    with team.store.session() as session:
        users = [(u.id, u.name, u.is_admin, u.disabled_at) for u in session.scalars(select(User).order_by(User.id))]
        tokens = [(t.prefix, t.token_hash, t.revoked_at) for t in session.scalars(select(ApiToken).order_by(ApiToken.id))]
        events = [(e.id, e.kind, e.message) for e in session.scalars(select(Event).order_by(Event.id))]
    return users, tokens, events


def place_attempt(store: Store, job_id: int, agent_token: str, *, number: int = 1, at: float | None = None) -> int:
    """Record an attempt that holds an instance (what the controller does after a launch); returns its id."""
    at = at or time.time()
    with store.session() as session:
        attempt = Attempt(
            job_id=job_id, number=number, state="running", provider="local", zone="local-a", market="spot",
            instance_type="local.cpu", price_per_hour=0.1, on_demand_price_per_hour=0.4,
            client_token=f"ct-{job_id}-{number}", token_hash=hash_token(agent_token), instance_id=f"i-{job_id}-{number}",
            created_at=at, started_at=at,
        )
        session.add(attempt)
        session.flush()
        return attempt.id
