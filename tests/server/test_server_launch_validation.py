"""An invalid job file is refused with 422, every problem named by field and line, and nothing is stored."""

from __future__ import annotations

import json

import pytest
from server_world import TINY_JOB, Team, place_attempt
from sqlalchemy import func, select

from spotrun.server.body_limit import MAX_BODY_BYTES
from spotrun.server.schemas import InvalidRequest
from spotrun.state import Attempt, Event, Job

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


def test_a_zone_the_local_cloud_does_not_have_is_422_naming_it(team: Team) -> None:
    spec = TINY_JOB + "spot: {zones: [local-b, mars-1]}\n"
    response = team.client.post("/api/v1/jobs", json={"spec": spec}, headers=team.as_user("alice"))
    assert response.status_code == 422
    assert [(p["field"], p["message"]) for p in response.json()["problems"]] == [
        ("spot.zones[1]", "unknown zone 'mars-1'; the local cloud's zones are local-a, local-b, local-c")]
    assert stored_rows(team) == (0, 0)


def test_a_price_past_any_instances_is_422_naming_it_and_metrics_stay_finite(team: Team) -> None:
    """Stored, a job priced at 1e308 $/h turned the team's /metrics into +Inf and NaN for good."""
    spec = TINY_JOB + "spot: {max_price: 2.0e+6}\n"
    spec = spec.replace("instance_type: local.cpu",
                        "instance_type: local.cpu, prices: {on_demand: 1.0e+308, spot: 1.0e+308}")
    response = team.client.post("/api/v1/jobs", json={"spec": spec}, headers=team.as_user("alice"))
    assert response.status_code == 422, response.text
    assert [(p["field"], p["message"]) for p in response.json()["problems"]] == [
        ("resources.prices.on_demand", "must be at most 1,000,000 $/h; got 1e+308"),
        ("resources.prices.spot", "must be at most 1,000,000 $/h; got 1e+308"),
        ("spot.max_price", "must be at most 1,000,000 $/h; got 2000000.0"),
    ]
    assert stored_rows(team) == (0, 0)


@pytest.mark.parametrize(("written", "field", "line"), [
    ("workdir: '~nosuchuser/x'\n", "workdir", 5), ("checkpoint: {store: '~nosuchuser/x'}\n", "checkpoint.store", 5),
])
def test_the_home_folder_of_a_user_the_server_lacks_is_422_naming_it(team: Team, written, field, line) -> None:
    """It was a 500 Internal Server Error (RuntimeError: Could not determine home directory)."""
    response = team.client.post("/api/v1/jobs", json={"spec": TINY_JOB + written, "base_dir": "/srv"},
                                headers=team.as_user("alice"))
    assert response.status_code == 422, response.text
    assert [(p["field"], p["line"], p["message"]) for p in response.json()["problems"]] == [
        (field, line, "'~nosuchuser/x' starts with ~nosuchuser, but this machine has no user 'nosuchuser'")]
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


def test_every_operation_of_the_api_spec_lists_the_413_of_a_body_too_large(team: Team) -> None:
    """The limit refuses a body before any route sees it, whichever the route; the spec listed no 413 anywhere."""
    spec = team.client.get("/openapi.json").json()
    unlisted = [f"{method.upper()} {path}" for path, operations in spec["paths"].items()
                for method, operation in operations.items() if "413" not in operation["responses"]]
    assert unlisted == []


@pytest.mark.parametrize("base_dir", ["relative/dir", "/tmp/\0x"])
def test_a_base_dir_that_is_not_an_absolute_path_is_refused_naming_it(team: Team, base_dir: str) -> None:
    answer = team.client.post("/api/v1/jobs", json={"spec": TINY_JOB, "base_dir": base_dir}, headers=team.as_user("alice"))
    assert answer.status_code == 422 and answer.json()["problems"][0]["field"] == "base_dir"
    assert team.client.get("/api/v1/jobs", headers=team.as_user("alice")).json() == []


def test_a_remote_launch_from_a_path_longer_than_the_server_takes_sends_its_file_name(team: Team, tmp_path) -> None:
    """The server refuses a `source` over 1,000 characters with FastAPI's 422, which the CLI read as the job file's
    problems: a pydantic traceback."""
    from fastapi.testclient import TestClient

    from spotrun.cli.backend import BackendError
    from spotrun.cli.remote import RemoteBackend

    folder = tmp_path
    for part in range(6):
        folder = folder / (f"{part}" * 200)
    folder.mkdir(parents=True)
    job_file = folder / "deep.yaml"
    job_file.write_text(TINY_JOB)
    assert len(str(job_file)) > 1000
    remote = RemoteBackend("http://testserver", team.tokens["alice"], client=TestClient(team.client.app))

    assert remote.launch(job_file).name == "tiny"

    import httpx

    from spotrun.cli.remote import _invalid_spec

    fastapis = httpx.Response(422, json={"detail": [{"type": "string_too_long", "loc": ["body", "source"]}]})
    assert _invalid_spec(fastapis) is None  # a 422 about the request itself is said as the server said it
    with pytest.raises(BackendError, match="answered 422: .*string_too_long"):
        remote._ok(fastapis)


@pytest.mark.parametrize("cloud", ["local", "aws"])
def test_a_checkpoint_store_of_a_protocol_no_filesystem_knows_is_refused_at_launch(team: Team, cloud: str) -> None:
    """Stored, it failed every attempt at its restore, after an instance was launched and paid for."""
    on_aws = "cloud: aws, instance_type: m5.large, prices: {on_demand: 0.1, spot: 0.04}"
    text = TINY_JOB.replace("cloud: local, instance_type: local.cpu", on_aws) if cloud == "aws" else TINY_JOB
    text += "checkpoint: {store: 's4://bucket/run'}\n"
    response = team.client.post("/api/v1/jobs", json={"spec": text}, headers=team.as_user("alice"))
    assert response.status_code == 422, response.text
    [problem] = response.json()["problems"]
    assert problem["field"] == "checkpoint.store" and "no filesystem knows the protocol 's4'" in problem["message"]
    assert stored_rows(team) == (0, 0)
    chained = text.replace("s4://bucket/run", "simplecache::s3://bucket/run")
    assert team.client.post("/api/v1/jobs", json={"spec": chained}, headers=team.as_user("alice")).status_code == 201


def test_a_remote_launch_reads_a_job_file_on_a_named_pipe_once(team: Team, tmp_path) -> None:
    """It read the file to check it, then again to send it: a pipe had nothing more to give, and it waited forever."""
    import os
    import threading

    from fastapi.testclient import TestClient

    from spotrun.cli.remote import RemoteBackend

    pipe = tmp_path / "piped.yaml"
    os.mkfifo(pipe)
    threading.Thread(target=pipe.write_text, args=(TINY_JOB,), daemon=True).start()
    remote = RemoteBackend("http://testserver", team.tokens["alice"], client=TestClient(team.client.app))
    launched: list = []
    launching = threading.Thread(target=lambda: launched.append(remote.launch(pipe)), daemon=True)
    launching.start()
    launching.join(timeout=30)
    if launching.is_alive():  # waiting for a second writer: give it one that writes nothing, so that it ends
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        launching.join(timeout=30)
    assert [job.name for job in launched] == ["tiny"] and stored_rows(team)[0] == 1


@pytest.mark.parametrize(
    ("path", "body", "unknown"),
    [
        # a misspelt base_dir left a relative workdir to the server's own folder
        ("/api/v1/jobs", {"spec": TINY_JOB, "base_dri": "/srv/job"}, "base_dri"),
        # a misspelt is_admin made a user who is no admin, silently
        ("/api/v1/users", {"name": "carol", "admin": True}, "admin"),
        # a misspelt notice preempted with the market's notice instead
        ("/api/v1/jobs/1/preempt", {"notice_secnds": 30}, "notice_secnds"),
    ],
)
def test_a_body_field_the_api_does_not_know_is_422_naming_it_and_nothing_changes(
    team: Team, path: str, body: dict, unknown: str
) -> None:
    team.launch("root")
    before = stored_rows(team)
    response = team.client.post(path, json=body, headers=team.as_user("root"))
    assert response.status_code == 422, response.text
    assert [(error["loc"], error["type"]) for error in response.json()["detail"]] == [
        (["body", unknown], "extra_forbidden")]
    assert stored_rows(team) == before
    assert team.client.get("/api/v1/users", headers=team.as_user("root")).json()[-1]["name"] == "root"


def test_a_request_without_a_job_file_is_422_in_the_shape_the_api_spec_documents(team: Team) -> None:
    response = team.client.post("/api/v1/jobs", json={"source": "a.yaml"}, headers=team.as_user("alice"))
    assert response.status_code == 422
    assert InvalidRequest.model_validate(response.json()).detail[0].loc == ["body", "spec"]
    documented = team.client.get("/openapi.json").json()["paths"]["/api/v1/jobs"]["post"]["responses"]["422"]
    shapes = documented["content"]["application/json"]["schema"]["anyOf"]
    assert {"$ref": "#/components/schemas/InvalidRequest"} in shapes  # besides InvalidSpec, the job file's problems
    assert stored_rows(team) == (0, 0)


def test_a_job_file_refused_for_its_length_is_echoed_in_part(team: Team) -> None:
    """The 422 for a 1.1 MB spec held the whole spec again."""
    from spotrun.server.refusals import MAX_ECHO_CHARS
    from spotrun.spec.expansion import MAX_SPEC_CHARS

    huge = "run: x\n#" + "y" * (MAX_SPEC_CHARS + 10)
    answer = team.client.post("/api/v1/jobs", json={"spec": huge}, headers=team.as_user("alice"))
    assert answer.status_code == 422
    [problem] = answer.json()["detail"]
    assert problem["type"] == "string_too_long" and problem["loc"] == ["body", "spec"]
    assert problem["input"].endswith(f"... ({len(json.dumps(huge)):,} characters in all, not echoed)")
    assert len(answer.content) < 2 * MAX_ECHO_CHARS
    small = team.client.post("/api/v1/jobs", json={"spec": 7}, headers=team.as_user("alice")).json()["detail"]
    assert small[0]["input"] == 7  # a short wrong value is echoed whole, as before


AGENT_TOKEN = "launch-validation-agent-token"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
@pytest.mark.parametrize("api", ["user", "agent"])
def test_a_json_body_not_sent_as_json_is_422_naming_its_content_type(team: Team, api: str, content_type) -> None:
    """A valid job sent as text/plain was refused with FastAPI's "Input should be a valid dictionary or object to
    extract fields from", which did not say that only its Content-Type was wrong."""
    attempt_id = place_attempt(team.store, team.launch("alice"), AGENT_TOKEN)
    path, body, token = {
        "user": ("/api/v1/jobs", {"spec": TINY_JOB}, team.tokens["alice"]),
        "agent": (f"/agent/v1/attempts/{attempt_id}/heartbeat", {"checkpoint_step": 5}, AGENT_TOKEN),
    }[api]
    headers = {"Authorization": f"Bearer {token}", **({"Content-Type": content_type} if content_type else {})}
    before = stored_rows(team)
    with team.store.session() as session:
        heard = session.get(Attempt, attempt_id).last_heartbeat_at

    response = team.client.post(path, content=json.dumps(body).encode(), headers=headers)

    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["header", "content-type"]
    said = f"this request's is {content_type!r}" if content_type else "this request has none"
    assert "the body must be sent as JSON, with Content-Type: application/json" in problem["msg"] and said in problem["msg"]
    assert stored_rows(team) == before
    with team.store.session() as session:
        assert session.get(Attempt, attempt_id).last_heartbeat_at == heard
    as_json = team.client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
    assert as_json.status_code in (200, 201), as_json.text
