"""The CLI's exit codes and plain answers, alike in every command and in both modes: a bad argument (a value no use
could take: unparsable, out of range) is exit 2 with an error naming the option, and changes nothing; a command
that cannot do what was asked (an unknown job, a node the job does not have, a user that exists) is exit 1.
`status` with no jobs says so in a line; `--json` stays a list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_world import TINY_JOB, Team
from typer.testing import CliRunner

from spotrun.api_models import Launched
from spotrun.cli import main as cli_main
from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.main import app
from spotrun.cli.remote import RemoteBackend
from spotrun.state import Event, Store
from spotrun.state.models import User

WIDE = {"COLUMNS": "300"}


def run(arguments: list[str]):
    result = CliRunner().invoke(app, arguments, env=WIDE)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result, " ".join(result.output.split())


@pytest.mark.parametrize(("arguments", "option", "message"), [
    (["preempt", "1", "--notice", "-5"], "--notice", "--notice must be between 0 and 3600 seconds, got -5.0"),
    (["preempt", "1", "--notice", "nan"], "--notice", "--notice must be between 0 and 3600 seconds, got nan"),
    (["preempt", "1", "--node", "5000"], "--node", "Invalid value for '--node'"),
    (["prune-logs", "--older-than", "xyz"], "--older-than", "--older-than must be a duration like"),
    (["prune-logs", "--older-than", "1000000d"], "--older-than", "--older-than must be at most 3650d"),
    (["server", "--port", "0", "--keep-logs", "soon"], "--keep-logs", "--keep-logs must be a duration like"),
    (["server", "--port", "0", "--keep-logs", "30"], "--keep-logs", "--keep-logs must be at least 1h"),
    (["simulate", "--policy", "psychic"], "--policy", "--policy: unknown policy 'psychic'"),
    (["simulate", "--every-hours", "0"], "--every-hours", "--every-hours must be a positive number, got 0"),
    (["user", "add", "no spaces"], "user name", "user name 'no spaces' must be 1-200 letters"),
    (["audit", "--kind", "user_deleted"], "--kind", "--kind 'user_deleted' is no kind of change; the kinds: user_added"),
    (["audit", "--since", "yesterday"], "--since", "--since must be a time ago (30m, 12h, 7d), a date or time in UTC"),
    (["audit", "--since", "3600"], "--since", "--since '3600' is ambiguous: write 3600s for that long ago, @3600 for"),
    (["audit", "--since", "99999d"], "--since", "--since must be at most 3650d"),
    (["audit", "--limit", "0"], "--limit", "Invalid value for '--limit'"),
    (["audit", "--limit", "1001"], "--limit", "Invalid value for '--limit'"),
    (["audit", "--before-id", "0"], "--before-id", "Invalid value for '--before-id'"),
    (["audit", "--user", ""], "--user", "--user: String should have at least 1 character"),
    (["launch", ""], "job_file", "the job file path is empty"),  # was ".: is a folder, not a job file"
    (["simulate", "--job", ""], "--job", "the job file path is empty"),
    # a negative one was "No such option: -1"; 0 was "no job with id 0", exit 1
    *[(arguments, "job_id", f"a job id is a positive whole number, as `spotrun status` shows it; got {given}")
      for given, arguments in [
          ("-1", ["status", "-1"]), ("0", ["status", "0"]), ("-1", ["status", "--json", "-1"]), ("-1", ["logs", "-1"]),
          ("-2", ["logs", "-f", "-2"]), ("-1", ["preempt", "-1"]), ("-3", ["preempt", "--notice", "5", "-3"]),
          ("0", ["cancel", "0"]), ("-1", ["cancel", "-1"]), ("-1.5", ["cost", "-1.5"]), ("-1", ["cost", "--", "-1"]),
      ]],
    (["checkpoints", "list", "--job", "-1"], "--job", "a job id is a positive whole number"),
    (["checkpoints", "export", "out.pt", "--job", "0"], "--job", "a job id is a positive whole number"),
])
def test_a_bad_argument_is_exit_2_naming_it_and_changes_nothing(
    home: Path, arguments: list[str], option: str, message: str
) -> None:
    result, said = run(arguments)
    assert result.exit_code == 2, said
    assert message in said and option in said, said
    assert "Traceback" not in said
    if home.exists():  # a store some refusals open first: nothing was added to it
        store = Store()
        try:
            with store.session() as session:
                assert session.query(User).count() == 0 and session.query(Event).count() == 0
        finally:
            store.dispose()


@pytest.mark.parametrize(("arguments", "message"), [
    (["status", "99"], "no job with id 99"),
    (["preempt", "99"], "no job with id 99"),
    (["preempt", "99", "--notice", "5"], "no job with id 99"),
    (["cancel", "99"], "no job with id 99"),
    (["cost", "99"], "no job with id 99"),
])
def test_an_unknown_job_stays_exit_1(home: Path, arguments: list[str], message: str) -> None:
    result, said = run(arguments)
    assert result.exit_code == 1 and message in said, said


def test_a_user_that_exists_is_exit_1_a_bad_name_exit_2(home: Path) -> None:
    assert run(["user", "add", "alice"])[0].exit_code == 0
    again, said = run(["user", "add", "alice"])
    assert again.exit_code == 1 and "user 'alice' already exists" in said, said
    reserved, said = run(["user", "add", "local"])
    assert reserved.exit_code == 2 and "is reserved" in said, said
    unknown, said = run(["token", "create", "bob"])
    assert unknown.exit_code == 1 and "no user named 'bob'" in said, said


# ---- embedded and remote mode alike -------------------------------------------------------------------------

@pytest.fixture(params=["embedded", "remote"])
def mode(request: pytest.FixtureRequest, team: Team, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's commands on the team's store: directly (embedded), or through the app as alice (remote)."""
    monkeypatch.delenv("SPOTRUN_SERVER", raising=False)
    if request.param == "embedded":
        monkeypatch.setattr(cli_main, "current_backend", lambda: EmbeddedBackend(team.store))
    else:
        monkeypatch.setattr(cli_main, "current_backend", lambda: RemoteBackend(
            "http://testserver", team.tokens["alice"], client=TestClient(team.client.app)))
    return request.param


def test_status_with_no_jobs_says_so_in_a_line_and_json_stays_a_list(team: Team, mode: str) -> None:
    table, said = run(["status"])
    assert table.exit_code == 0 and table.output == "no jobs yet: spotrun launch JOB_FILE\n", table.output
    every, _ = run(["status", "--all"])
    assert every.exit_code == 0 and every.output == "no jobs yet: spotrun launch JOB_FILE\n", every.output
    listed, _ = run(["status", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []

    team.launch("alice")
    shown, said = run(["status"])
    assert shown.exit_code == 0 and "no jobs yet" not in said and "tiny" in said, said


GANG_OF_3 = TINY_JOB.replace("resources: {", "resources: {nodes: 3, ")


@pytest.mark.parametrize(("text", "node", "message"), [
    (TINY_JOB, 3, "job 1 has 1 node: there is no node 3 (only node 0)"),
    (TINY_JOB, 1, "job 1 has 1 node: there is no node 1 (only node 0)"),
    (GANG_OF_3, 3, "job 1 has 3 nodes: there is no node 3 (they are numbered 0 to 2)"),
], ids=["one-node-3", "one-node-1", "gang-of-3-node-3"])
def test_preempting_a_node_the_job_does_not_have_names_its_node_count(
    team: Team, mode: str, text: str, node: int, message: str
) -> None:
    job_id = team.launch("alice", text)
    result, said = run(["preempt", str(job_id), "--node", str(node)])
    assert result.exit_code == 1 and said == f"error: {message}", said
    with team.store.session() as session:
        assert session.query(Event).filter_by(job_id=job_id, kind="chaos").count() == 0


def test_preempting_a_node_the_job_has_but_not_running_says_that(team: Team, mode: str) -> None:
    job_id = team.launch("alice", GANG_OF_3)
    result, said = run(["preempt", str(job_id), "--node", "2"])
    assert result.exit_code == 1 and "holds no running instance as node 2 to preempt" in said, said


class InterruptedWhileFollowed:
    """A backend that launches job 7, and whose first read while following it is cut short by Ctrl-C."""

    def launch(self, job_file: Path) -> Launched:
        return Launched(id=7, name="tiny", owner="local")

    def rows(self, job_id=None, **selection):
        raise KeyboardInterrupt


def test_ctrl_c_on_launch_follow_says_the_job_keeps_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It exited 130 without a word, and the job ran on."""
    job_file = tmp_path / "tiny.yaml"
    job_file.write_text(TINY_JOB)
    monkeypatch.setattr(cli_main, "current_backend", InterruptedWhileFollowed)
    result = CliRunner().invoke(app, ["launch", str(job_file), "--follow"], env=WIDE)
    assert result.exit_code == 130, result.output
    assert result.stdout == "launched job 7 (tiny)\n"
    assert result.stderr == "stopped following; job 7 keeps running: `spotrun logs -f 7`, `spotrun cancel 7`\n"


@pytest.mark.parametrize("base", ["http://testserver/spotrun", "http://testserver/api"])
@pytest.mark.parametrize("arguments", [["status"], ["status", "1"], ["logs", "1"], ["cost", "1"]])
def test_a_server_url_with_a_wrong_path_is_told_to_be_the_servers_base_url(
    team: Team, monkeypatch: pytest.MonkeyPatch, base: str, arguments: list[str]
) -> None:
    """It answered "404: Not Found" (`status`), or "no job with id 1" for a job that is there."""
    team.launch("alice")
    monkeypatch.setattr(cli_main, "current_backend", lambda: RemoteBackend(
        base, team.tokens["alice"], client=TestClient(team.client.app)))
    result, said = run(arguments)
    assert result.exit_code == 1 and "no job" not in said, said
    assert (f"error: the server at {base} answered 404: Not Found (SPOTRUN_SERVER is the server's base URL, as "
            "`spotrun server` prints it, without /api/v1)") == said, said
