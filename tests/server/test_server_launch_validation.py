"""An invalid job file is refused with 422, every problem named by field and line, and nothing is stored."""

from __future__ import annotations

import pytest
from server_world import TINY_JOB, Team
from sqlalchemy import func, select

from spotrun.server.body_limit import MAX_BODY_BYTES
from spotrun.state import Event, Job

BAD_JOB = """\
name: bad
run: "true"
resources: {cloud: local, instance_type: local.cpu}
spot: {max_wait: soon}
unknown_key: 1
"""


def stored_rows(team: Team) -> tuple[int, int]:
    with team.store.session() as session:
        return session.scalar(select(func.count(Job.id))), session.scalar(select(func.count(Event.id)))


def test_invalid_job_file_is_422_with_field_names_and_lines(team: Team) -> None:
    response = team.client.post("/api/v1/jobs", json={"spec": BAD_JOB, "source": "bad.yaml"},
                                headers=team.as_user("alice"))
    assert response.status_code == 422
    body = response.json()
    assert body["detail"] == "invalid job file" and body["source"] == "bad.yaml"
    assert [(p["field"], p["line"]) for p in body["problems"]] == [("spot.max_wait", 4), ("unknown_key", 5)]
    assert all(p["message"] for p in body["problems"])
    assert stored_rows(team) == (0, 0)


def test_a_job_the_controller_cannot_place_is_refused_at_submit(team: Team) -> None:
    response = team.client.post("/api/v1/jobs", json={"spec": 'run: "true"\nresources: {cloud: aws}\n'},
                                headers=team.as_user("alice"))
    assert response.status_code == 422
    assert [p["field"] for p in response.json()["problems"]] == ["resources.instance_type"]
    assert stored_rows(team) == (0, 0)


def test_text_that_is_not_a_mapping_is_422(team: Team) -> None:
    for text in ("", "- a list\n", "key: [unclosed\n", "\x00"):
        response = team.client.post("/api/v1/jobs", json={"spec": text}, headers=team.as_user("alice"))
        assert response.status_code == 422, (text, response.text)
        assert response.json()["problems"], text
    assert stored_rows(team) == (0, 0)


PLACEMENT_PROBLEMS = """\
name: later
run: "true"
resources:
  cloud: aws
  instance_type: p3.2xlarge
checkpoint: {store: relstore}
spot:
  policy: magic
  deadline: 1h
estimated_duration: 2h
"""


def test_every_problem_found_after_parsing_is_listed_at_once_with_its_line(team: Team) -> None:
    """The checks that need a parsed job (the checkpoint store, the policy, the deadline) stopped at the first, and
    named no line."""
    response = team.client.post("/api/v1/jobs", json={"spec": PLACEMENT_PROBLEMS, "source": "later.yaml"},
                                headers=team.as_user("alice"))
    assert response.status_code == 422
    body = response.json()
    assert body["source"] == "later.yaml"
    assert [(p["field"], p["line"]) for p in body["problems"]] == [
        ("checkpoint.store", 6), ("spot.policy", 8), ("spot.deadline", 9)]
    assert stored_rows(team) == (0, 0)


def test_a_body_larger_than_any_request_is_refused_before_it_is_read(team: Team) -> None:
    """A 200 MB body with no token was read and parsed (6 s, 700 MiB of the server's memory) to be told 401."""
    declared = team.client.post("/api/v1/jobs", content=b"x" * (MAX_BODY_BYTES + 1),
                                headers={"content-type": "application/json"})
    assert declared.status_code == 413 and "request body is over" in declared.json()["detail"]

    def streamed():  # no Content-Length: counted as it arrives
        for _ in range(MAX_BODY_BYTES // 2**20 + 2):
            yield b" " * 2**20

    chunked = team.client.post("/api/v1/jobs", content=streamed(), headers={**team.as_user("alice"),
                                                                           "content-type": "application/json"})
    assert chunked.status_code == 413
    assert team.client.get("/api/v1/jobs", headers=team.as_user("alice")).json() == []


@pytest.mark.parametrize("base_dir", ["relative/dir", "/tmp/\0x"])
def test_a_base_dir_that_is_not_an_absolute_path_is_refused_naming_it(team: Team, base_dir: str) -> None:
    answer = team.client.post("/api/v1/jobs", json={"spec": TINY_JOB, "base_dir": base_dir}, headers=team.as_user("alice"))
    assert answer.status_code == 422 and answer.json()["problems"][0]["field"] == "base_dir"
    assert team.client.get("/api/v1/jobs", headers=team.as_user("alice")).json() == []
