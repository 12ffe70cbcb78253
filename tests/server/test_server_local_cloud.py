"""The local cloud runs a job's command on the server's own machine: on the team server, only where its operator
allows it (SPOTRUN_SERVER_LOCAL_CLOUD). The other server tests opt in (conftest.py's `team`)."""

from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient
from server_world import TINY_JOB, Team
from typer.testing import CliRunner

from spotrun.cli import main as cli_main
from spotrun.cli.main import app as cli
from spotrun.cli.remote import RemoteBackend
from spotrun.config import InvalidSetting
from spotrun.control import jobs as jobs_api
from spotrun.server import serve as serve_module
from spotrun.server.app import create_app
from spotrun.server.local_cloud import LOCAL_CLOUD_VAR, LocalCloudAccess
from spotrun.server.serve import local_cloud_from_env, warn_of_local_jobs_refused_now
from spotrun.spec import parse_spec
from spotrun.state import Job

# The rule is checked before the store is written: one database is enough.
on_sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
AWS_JOB = "name: on-aws\nrun: 'true'\nresources: {cloud: aws, instance_type: p3.2xlarge}\n"


def launch(team: Team, access: LocalCloudAccess | None, user: str, spec: str = TINY_JOB) -> dict:
    """POST the job to an app with `access` (None: the default) as `user`; the answer's status and body."""
    app = create_app(team.store) if access is None else create_app(team.store, local_cloud=access)
    with TestClient(app) as client:
        response = client.post("/api/v1/jobs", json={"spec": spec}, headers=team.as_user(user))
    return {"status": response.status_code, **response.json()}


def stored_jobs(team: Team) -> int:
    with team.store.session() as session:
        return session.query(Job).count()


@on_sqlite
def test_a_users_local_job_is_refused_by_a_server_that_does_not_allow_it(team: Team):
    for user in ("alice", "root"):  # by default nobody's, an admin's neither
        answer = launch(team, None, user)
        assert answer["status"] == 422, answer
        assert answer["detail"] == "job refused by this server's settings"  # the file may be valid
        [problem] = answer["problems"]
        assert problem["field"] == "resources.cloud" and problem["line"] == 4
        assert "'local'" in problem["message"] and "SPOTRUN_SERVER_LOCAL_CLOUD=off" in problem["message"]
    assert stored_jobs(team) == 0


@on_sqlite
@pytest.mark.parametrize(("access", "user", "allowed"), [
    (LocalCloudAccess.ADMINS, "alice", False), (LocalCloudAccess.ADMINS, "root", True),
    (LocalCloudAccess.ALL, "alice", True), (LocalCloudAccess.OFF, "root", False),
])
def test_the_setting_says_whose_local_jobs_are_accepted(team: Team, access, user, allowed):
    answer = launch(team, access, user)
    assert answer["status"] == (201 if allowed else 422), answer
    if not allowed:
        assert f"SPOTRUN_SERVER_LOCAL_CLOUD={access.value}" in answer["problems"][0]["message"]


@on_sqlite
def test_launch_says_the_servers_setting_refused_a_job_file_not_that_it_is_invalid(team: Team, tmp_path, monkeypatch):
    """A user's `spotrun launch` of a file an admin's launch runs printed "invalid job file"."""
    job_file = tmp_path / "small.yaml"
    job_file.write_text(TINY_JOB)
    with TestClient(create_app(team.store, local_cloud=LocalCloudAccess.ADMINS)) as client:
        monkeypatch.setattr(cli_main, "current_backend",
                            lambda: RemoteBackend("http://testserver", team.tokens["alice"], client=client))
        result = CliRunner().invoke(cli, ["launch", str(job_file)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output  # a job file this server refuses, as README's Commands say
    heading, problem = result.stderr.splitlines()
    assert heading == "job refused by this server's settings", result.stderr
    assert problem.startswith(f"{job_file}:4: resources.cloud: cloud 'local' runs the job's command on the team "
                              "server's own machine, which this server allows its admins only (its operator's "
                              "setting SPOTRUN_SERVER_LOCAL_CLOUD=admins)"), problem
    assert stored_jobs(team) == 0


@on_sqlite
def test_a_job_that_names_no_cloud_is_told_to_name_one(team: Team):
    answer = launch(team, None, "alice", spec="name: t\nrun: 'true'\n")
    [problem] = answer["problems"]
    assert answer["status"] == 422 and problem["field"] == "resources.cloud"
    assert problem["message"].startswith("not given, so 'local'") and "name the cloud to run on (aws," in problem["message"]


@on_sqlite
def test_a_refused_local_job_is_not_checked_against_the_servers_folders(team: Team):
    """`workdir` is looked for on the server's machine: its answer would tell a user which folders exist there."""
    answer = launch(team, None, "alice", spec=TINY_JOB + "workdir: /no/such/folder\n")
    assert [problem["field"] for problem in answer["problems"]] == ["resources.cloud"]


@on_sqlite
def test_a_job_on_another_cloud_is_accepted_with_the_local_cloud_off(team: Team):
    assert launch(team, None, "alice", spec=AWS_JOB)["status"] == 201


@pytest.mark.parametrize(("value", "expected"), [
    (None, LocalCloudAccess.OFF), ("", LocalCloudAccess.OFF), ("admins", LocalCloudAccess.ADMINS),
    ("all", LocalCloudAccess.ALL),
])
def test_the_setting_is_read_from_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(LOCAL_CLOUD_VAR, raising=False)
    else:
        monkeypatch.setenv(LOCAL_CLOUD_VAR, value)
    assert local_cloud_from_env() is expected


def test_a_setting_that_is_none_of_them_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(LOCAL_CLOUD_VAR, "yes")
    with pytest.raises(InvalidSetting) as refused:
        local_cloud_from_env()
    assert "SPOTRUN_SERVER_LOCAL_CLOUD='yes'" in str(refused.value) and "'admins'" in str(refused.value)


@on_sqlite
def test_the_server_stops_before_it_listens_on_a_local_cloud_setting_it_cannot_use(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    listened = []
    monkeypatch.setattr(serve_module, "_listen", lambda *args: listened.append(args))
    result = CliRunner().invoke(cli, ["server", "--port", "0", "--database-url", store.url, "--no-controller"],
                                env={LOCAL_CLOUD_VAR: "everyone", "COLUMNS": "300"})
    assert result.exit_code == 2 and "SPOTRUN_SERVER_LOCAL_CLOUD='everyone' is refused" in result.output, result.output
    assert listened == []


@on_sqlite
def test_the_server_names_the_live_local_jobs_accepted_before_that_it_would_refuse_now(team: Team, caplog):
    now = time.time()
    local = parse_spec(TINY_JOB)
    alices = jobs_api.submit(team.store, local, now, owner="alice")
    jobs_api.submit(team.store, local, now, owner="root")  # an admin's: allowed
    jobs_api.submit(team.store, local, now)  # owner "local": embedded mode's, on the store, not the API's
    jobs_api.submit(team.store, parse_spec(AWS_JOB), now, owner="alice")
    ended = jobs_api.submit(team.store, local, now, owner="bob")
    with team.store.session() as session:
        session.get(Job, ended).state = "SUCCEEDED"

    with caplog.at_level(logging.WARNING, logger="spotrun.server"):
        warn_of_local_jobs_refused_now(team.store, LocalCloudAccess.ADMINS)
        warn_of_local_jobs_refused_now(team.store, LocalCloudAccess.ALL)

    [warning] = caplog.messages  # none with `all`
    assert f"SPOTRUN_SERVER_LOCAL_CLOUD=admins would refuse now still run, as they were accepted: {alices} (" in warning
