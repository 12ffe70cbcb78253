"""Text no store can keep is refused 422 on both databases, never a 500: a lone UTF-16 surrogate anywhere in a JSON
body ("\\ud800", valid JSON but no text UTF-8 can carry), and a NUL character in a field the store keeps as text
(PostgreSQL's text holds none). A log chunk is kept as bytes: its NULs are the trainer's output, and stay."""

from __future__ import annotations

import pytest
from server_world import Team, place_attempt
from sqlalchemy import select

from spotrun.state import Attempt, Event, Job, LogChunk

AGENT_TOKEN = "agent-token-of-attempt-1"
SURROGATE = '"\\ud800"'  # as the JSON text holds it


def raw(team: Team, path: str, body: str, headers: dict[str, str]):
    return team.client.post(path, content=body.encode(), headers={**headers, "Content-Type": "application/json"})


def stored_rows(team: Team) -> tuple[int, int]:
    with team.store.session() as session:
        return len(session.scalars(select(Job)).all()), len(session.scalars(select(Event)).all())


@pytest.mark.parametrize(("body", "field"), [
    ('{"spec": ' + SURROGATE + '}', None),
    ('{"spec": "run: x", "source": ' + SURROGATE + '}', None),
    ('{"spec": "run: x", "base_dir": "/a", "nested": {' + SURROGATE + ': 1}}', None),
    ('{"spec": "run: x", "source": "a\\u0000b"}', "source"),  # as the job file's problems are: the CLI shows them
    ('{"spec": "run: x", "base_dir": "/tmp/\\u0000"}', "base_dir"),
])
def test_a_job_launch_with_text_no_store_keeps_is_422_and_stores_nothing(team: Team, body: str, field) -> None:
    before = stored_rows(team)
    response = raw(team, "/api/v1/jobs", body, team.as_user("alice"))
    assert response.status_code == 422, response.text
    if field is not None:
        assert response.json()["problems"][0]["field"] == field
    assert stored_rows(team) == before


def test_a_surrogate_pair_is_text_and_passes(team: Team) -> None:
    response = raw(team, "/api/v1/jobs", '{"spec": "run: x\\nenv: {MOOD: \\"\\ud83d\\ude00\\"}"}', team.as_user("alice"))
    assert response.status_code == 201, response.text


def test_a_user_with_a_surrogate_or_a_nul_in_its_name_is_422(team: Team) -> None:
    admin = team.as_user("root")
    assert raw(team, "/api/v1/users", '{"name": ' + SURROGATE + '}', admin).status_code == 422
    assert team.client.post("/api/v1/users/%00/tokens", headers=admin).status_code == 422


@pytest.mark.parametrize(("endpoint", "body"), [
    ("notice", '{"source": "aws\\u0000"}'),
    ("notice", '{"source": "aws-imds", "detail": ' + SURROGATE + '}'),
    ("warning", '{"source": "aws-imds", "detail": "a\\u0000b"}'),
    ("warning", '{"source": "aws-imds", "kind": ' + SURROGATE + '}'),
    ("started", '{"address": "10.0.0.1\\u0000"}'),
    ("slow_save", '{"checkpoint_step": 1, "upload_seconds": 1, "budget_seconds": 2, "notice": "n\\u0000"}'),
    ("logs", '{"offset": 0, "data": ' + SURROGATE + '}'),
])
def test_an_agent_report_with_text_no_store_keeps_is_422_and_changes_nothing(team: Team, endpoint: str, body: str) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, AGENT_TOKEN)
    before = stored_rows(team)
    response = raw(team, f"/agent/v1/attempts/{attempt_id}/{endpoint}", body,
                   {"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert response.status_code == 422, response.text
    assert stored_rows(team) == before
    with team.store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        assert attempt.notice_at is None and attempt.address is None and attempt.log_bytes == 0


def test_a_log_chunk_keeps_the_nul_characters_a_trainer_wrote(team: Team) -> None:
    job_id = team.launch("alice")
    attempt_id = place_attempt(team.store, job_id, AGENT_TOKEN)
    response = raw(team, f"/agent/v1/attempts/{attempt_id}/logs", '{"offset": 0, "data": "a\\u0000b\\n"}',
                   {"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert response.status_code == 200, response.text
    with team.store.session() as session:
        assert [chunk.data for chunk in session.scalars(select(LogChunk))] == [b"a\x00b\n"]


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/users", "/agent/v1/attempts/{attempt_id}/notice"])
def test_a_body_that_is_not_utf8_is_422_naming_it_and_changes_nothing(team: Team, path: str) -> None:
    attempt_id = place_attempt(team.store, team.launch("alice"), AGENT_TOKEN)
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}"} if path.startswith("/agent/") else team.as_user("root")
    before = stored_rows(team)
    response = team.client.post(path.format(attempt_id=attempt_id), content=b'{"spec": "run: \xff"}',
                                headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text  # was FastAPI's 400, which the API's spec does not list
    [problem] = response.json()["detail"]
    assert problem["msg"] == "JSON decode error" and "not UTF-8" in problem["ctx"]["error"]
    assert stored_rows(team) == before
