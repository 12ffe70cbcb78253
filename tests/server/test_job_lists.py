"""A store keeps every job it ran: lists ask for the jobs not ended and the newest ended ones, by the API's `ended`,
`limit` and `before`, and only the caller's jobs are read (an admin's: everyone's). `spotrun status` lists those
(`--all`: every job), in embedded and remote mode alike."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from server_world import Team
from sqlalchemy import insert
from typer.testing import CliRunner

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.job_list import listed_jobs
from spotrun.cli.main import app
from spotrun.cli.remote import RemoteBackend
from spotrun.control.jobs import JobNotFound
from spotrun.state import Job, Store

ENDED_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


def add_jobs(store: Store, owners_and_states: list[tuple[str, str]]) -> list[int]:
    with store.session() as session:
        first = (session.query(Job).count() or 0) + 1
        ids = list(range(first, first + len(owners_and_states)))
        session.execute(insert(Job), [
            dict(id=job_id, name=f"job-{job_id}", owner=owner, spec={}, state=state, created_at=0.0, updated_at=0.0)
            for job_id, (owner, state) in zip(ids, owners_and_states, strict=True)
        ])
    return ids


def listed(team: Team, user: str, query: str = "") -> list[int]:
    response = team.client.get(f"/api/v1/jobs{query}", headers=team.as_user(user))
    assert response.status_code == 200, response.text
    return [row["id"] for row in response.json()]


def test_the_api_lists_the_callers_jobs_by_ended_newest_and_before(team: Team) -> None:
    # alice: 1 RUNNING, 3 SUCCEEDED, 5 FAILED, 7 WAITING; bob: 2, 4, 6, 8, all ended and newer than most of alice's
    add_jobs(team.store, [("alice", "RUNNING"), ("bob", "SUCCEEDED"), ("alice", "SUCCEEDED"), ("bob", "FAILED"),
                          ("alice", "FAILED"), ("bob", "CANCELLED"), ("alice", "WAITING"), ("bob", "SUCCEEDED")])
    assert listed(team, "alice") == [1, 3, 5, 7]
    assert listed(team, "alice", "?ended=false") == [1, 7]
    assert listed(team, "alice", "?ended=true") == [3, 5]
    assert listed(team, "alice", "?limit=3") == [3, 5, 7]  # bob's newer jobs do not take her places
    assert listed(team, "alice", "?ended=true&limit=1") == [5]
    assert listed(team, "alice", "?before=5&limit=1") == [3]
    assert listed(team, "root", "?ended=true&limit=3") == [5, 6, 8]
    assert listed(team, "root", "?ended=false") == [1, 7]


@pytest.mark.parametrize("query", ["?limit=0", "?limit=1001", "?limit=x", "?before=0", "?ended=perhaps"])
def test_a_bad_selection_is_refused_and_names_the_parameter(team: Team, query: str) -> None:
    add_jobs(team.store, [("alice", "RUNNING")])
    response = team.client.get(f"/api/v1/jobs{query}", headers=team.as_user("alice"))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", query[1:].split("=")[0]]
    assert listed(team, "alice") == [1]


@pytest.fixture(params=["embedded", "remote"])
def backend(request: pytest.FixtureRequest, team: Team):
    if request.param == "embedded":
        return EmbeddedBackend(team.store)
    # the app in this process, through a test client of its own
    return RemoteBackend("http://testserver", team.tokens["root"], client=TestClient(team.client.app))


def test_status_lists_the_jobs_not_ended_and_the_newest_ended(team: Team, backend) -> None:
    states = [ENDED_STATES[n % 3] for n in range(25)]
    states[3] = states[17] = "RUNNING"
    ids = add_jobs(team.store, [("alice", state) for state in states])

    shown = listed_jobs(backend, recent_ended=20)
    ended = [i for i, state in zip(ids, states) if state in ENDED_STATES]
    assert [row.id for row in shown.rows] == sorted([4, 18, *ended[-20:]])
    assert shown.older_ended_left_out

    assert [row.id for row in listed_jobs(backend, every=True).rows] == ids
    assert not listed_jobs(backend, recent_ended=23).older_ended_left_out  # exactly the 23 ended ones


def test_spotrun_status_says_when_older_ended_jobs_are_left_out(
    tmp_path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPOTRUN_SERVER", raising=False)
    store = EmbeddedBackend().store
    add_jobs(store, [("local", "SUCCEEDED")] * 21 + [("local", "RUNNING")])
    runner = CliRunner()

    table = runner.invoke(app, ["status"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "older ended jobs left out: spotrun status --all" in table.output
    assert "job-1 " not in table.output and "job-2 " in table.output and "job-22 " in table.output

    rows = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    assert [row["id"] for row in rows] == list(range(2, 23))
    every = json.loads(runner.invoke(app, ["status", "--all", "--json"]).stdout)
    assert [row["id"] for row in every] == list(range(1, 23))
    assert "left out" not in runner.invoke(app, ["status", "--all"]).output


class ServerWithoutSelection:
    """A server older than `ended` and `limit`: it sends every job whatever the request asks."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def rows(self, job_id=None, *, ended=None, limit=None):
        return self.backend.rows(job_id)


def test_status_lists_every_job_from_a_server_that_ignores_the_selection(team: Team) -> None:
    ids = add_jobs(team.store, [("alice", "SUCCEEDED")] * 25 + [("alice", "RUNNING")])
    shown = listed_jobs(ServerWithoutSelection(EmbeddedBackend(team.store)))
    assert [row.id for row in shown.rows] == ids and not shown.older_ended_left_out


@pytest.mark.parametrize("job_id", [0, -1, 3_000_000_000, 7])
def test_an_id_no_job_has_is_the_same_refusal_embedded_and_remote(team: Team, backend, job_id: int) -> None:
    """Remote mode printed the server's 422 for ids out of the table's range, where embedded said no such job."""
    for ask in (backend.detail, backend.cost, backend.cancel, lambda n: list(backend.log_stream(n, follow=False))):
        with pytest.raises(JobNotFound, match=f"no job with id {job_id}"):
            ask(job_id)


def status_output(monkeypatch: pytest.MonkeyPatch, backend, *arguments: str) -> str:
    monkeypatch.setattr("spotrun.cli.main.current_backend", lambda: backend)
    result = CliRunner().invoke(app, ["status", *arguments], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    return result.stdout


def header_cells(table: str) -> list[str]:
    header = next(line for line in table.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in header.split("┃") if cell.strip()]


def test_an_admins_status_names_whose_jobs_they_are_in_both_modes(
    team: Team, backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin's remote `status` had no owner column, and `status --json` dropped the `owner` the API lists."""
    add_jobs(team.store, [("alice", "RUNNING"), ("bob", "SUCCEEDED")])

    rows = json.loads(status_output(monkeypatch, backend, "--json"))
    assert [(row["id"], row["owner"]) for row in rows] == [(1, "alice"), (2, "bob")]
    assert json.loads(status_output(monkeypatch, backend, "2", "--json"))[0]["owner"] == "bob"

    table = status_output(monkeypatch, backend)
    assert header_cells(table)[:3] == ["id", "name", "owner"], table
    assert [line.split("│")[3].strip() for line in table.splitlines() if "job-" in line] == ["alice", "bob"], table


def test_one_users_jobs_get_no_owner_column(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """Embedded mode's jobs are all `local`'s, and a user's list holds their own: the table is as it was."""
    add_jobs(team.store, [("local", "RUNNING"), ("local", "SUCCEEDED")])

    table = status_output(monkeypatch, EmbeddedBackend(team.store))
    assert header_cells(table) == [
        "id", "name", "state", "attempts", "preemptions", "market/zone", "elapsed", "cost so far"], table
    assert [row["owner"] for row in json.loads(status_output(monkeypatch, EmbeddedBackend(team.store), "--json"))] == [
        "local", "local"]


def remote_status(team: Team, user: str, monkeypatch: pytest.MonkeyPatch, *arguments: str) -> tuple[str, list[str]]:
    """`spotrun status` over the server as `user`, through a backend of its own; and the paths it asked for."""
    asked: list[str] = []
    client = TestClient(team.client.app)
    client.event_hooks = {"request": [lambda request: asked.append(request.url.path)]}
    monkeypatch.setattr("spotrun.cli.main.current_backend",
                        lambda: RemoteBackend("http://testserver", team.tokens[user], client=client))
    result = CliRunner().invoke(app, ["status", *arguments], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    return result.stdout, asked


def test_an_admin_listing_only_another_users_jobs_sees_whose_they_are(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner column showed only for more than one owner: an admin whose list held Bob's jobs alone saw them as
    if they were their own. The list's answer names the caller (`X-Spotrun-User`): no request more than before."""
    add_jobs(team.store, [("bob", "RUNNING"), ("bob", "SUCCEEDED")])

    table, asked = remote_status(team, "root", monkeypatch)
    assert header_cells(table)[:3] == ["id", "name", "owner"], table
    assert [line.split("│")[3].strip() for line in table.splitlines() if "job-" in line] == ["bob", "bob"], table
    assert asked == ["/api/v1/jobs", "/api/v1/jobs"]  # the jobs not ended, the newest ended: no /me

    one, asked = remote_status(team, "root", monkeypatch, "1")
    assert header_cells(one)[:3] == ["id", "name", "owner"], one
    assert asked == ["/api/v1/jobs/1"]


def test_a_users_own_jobs_get_no_owner_column_over_a_server(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    add_jobs(team.store, [("bob", "RUNNING"), ("root", "SUCCEEDED"), ("bob", "FAILED")])
    for user in ("bob", "root"):  # bob's list holds his own jobs; root's own job alone
        table, _ = remote_status(team, user, monkeypatch, *(["2"] if user == "root" else []))
        assert "owner" not in header_cells(table), (user, table)


def test_embedded_status_names_the_owner_of_jobs_launched_through_a_server(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Embedded mode's own jobs are `local`'s; a store a server shares holds its users' jobs, not the caller's."""
    add_jobs(team.store, [("alice", "RUNNING")])
    table = status_output(monkeypatch, EmbeddedBackend(team.store))
    assert header_cells(table)[:3] == ["id", "name", "owner"], table


def test_the_job_answers_name_the_caller(team: Team) -> None:
    add_jobs(team.store, [("alice", "RUNNING")])
    for path in ("/api/v1/jobs", "/api/v1/jobs/1"):
        assert team.client.get(path, headers=team.as_user("root")).headers["X-Spotrun-User"] == "root"
        assert team.client.get(path, headers=team.as_user("alice")).headers["X-Spotrun-User"] == "alice"


class ServerWithoutCaller:
    """A server older than `X-Spotrun-User`: its answers do not say who the caller is."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def rows(self, job_id=None, **selection):
        return self.backend.rows(job_id, **selection)

    def caller(self) -> None:
        return None


def test_status_against_a_server_that_does_not_name_the_caller_shows_owners_of_more_than_one_user(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_jobs(team.store, [("bob", "RUNNING")])
    one_owner = status_output(monkeypatch, ServerWithoutCaller(EmbeddedBackend(team.store)))
    assert "owner" not in header_cells(one_owner), one_owner
    add_jobs(team.store, [("alice", "RUNNING")])
    two = status_output(monkeypatch, ServerWithoutCaller(EmbeddedBackend(team.store)))
    assert header_cells(two)[:3] == ["id", "name", "owner"], two
