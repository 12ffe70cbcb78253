"""`spotrun audit`: the audit log of users and tokens, on this machine's store or over the server SPOTRUN_SERVER
names (admins only). `spotrun user` and `spotrun token` on the store recorded nothing: whoever reached the database,
the most powerful way to change users, left no trace. They record their changes as `cli:<OS user>@<host>` now."""

from __future__ import annotations

import json
import os
import pwd
import socket
import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from server_world import Team
from typer.testing import CliRunner

from spotrun.cli.main import app

OS_ACTOR = f"cli:{pwd.getpwuid(os.geteuid()).pw_name}@{socket.gethostname()}"


@pytest.fixture
def env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This machine's store, on SQLite and on PostgreSQL, and no server named."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", database_url)
    monkeypatch.delenv("SPOTRUN_SERVER", raising=False)
    return {"COLUMNS": "300"}


def invoke(arguments: list[str], env: dict[str, str]):
    result = CliRunner().invoke(app, arguments, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def done(arguments: list[str], env: dict[str, str]) -> str:
    result = invoke(arguments, env)
    assert result.exit_code == 0, (arguments, result.output)
    return result.stdout.strip()


def prefix_of(token: str) -> str:
    return token.split("_")[1]


def secret_of(token: str) -> str:
    return token.split("_", 2)[2]


def table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


def offboarding_on_the_store(env: dict[str, str]) -> dict[str, str]:
    """Every kind of change, by the CLI on the store; the tokens it printed."""
    tokens = {"root": done(["user", "add", "root", "--admin"], env), "alice": done(["user", "add", "alice"], env)}
    tokens["second"] = done(["token", "create", "alice"], env)
    done(["token", "revoke", tokens["second"]], env)
    done(["user", "set-admin", "alice", "--admin"], env)
    done(["user", "set-admin", "alice", "--no-admin"], env)
    done(["user", "disable", "alice"], env)
    done(["user", "enable", "alice"], env)
    return tokens


def test_changes_on_the_store_are_recorded_as_the_os_account_and_listed_newest_first(env: dict[str, str]) -> None:
    tokens = offboarding_on_the_store(env)

    as_json = invoke(["audit", "--json"], env)

    assert as_json.exit_code == 0, as_json.output
    events = json.loads(as_json.stdout)
    alice, second, root = prefix_of(tokens["alice"]), prefix_of(tokens["second"]), prefix_of(tokens["root"])
    assert [(e["kind"], e["actor"], e["user"], e["token_prefix"], e["revoked_tokens"]) for e in events] == [
        ("user_enabled", OS_ACTOR, "alice", None, []),
        ("user_disabled", OS_ACTOR, "alice", None, [alice]),  # the second token was revoked before
        ("admin_removed", OS_ACTOR, "alice", None, []),
        ("admin_granted", OS_ACTOR, "alice", None, []),
        ("token_revoked", OS_ACTOR, "alice", second, []),
        ("token_created", OS_ACTOR, "alice", second, []),
        ("user_added", OS_ACTOR, "alice", alice, []),
        ("user_added", OS_ACTOR, "root", root, []),
    ]
    assert events[0]["message"] == f"user alice enabled by {OS_ACTOR}"
    assert all(isinstance(e["at"], float) and abs(e["at"] - time.time()) < 600 for e in events)

    table = invoke(["audit"], env)
    assert table.exit_code == 0, table.output
    heading = table.stdout.splitlines()[0]
    assert heading.startswith("changes to users and tokens in the store ") and heading.endswith(", newest first:")
    rows = table_rows(table.stdout)
    assert [row[0] for row in rows] == [str(e["id"]) for e in events]
    assert rows[1][1:] == [time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(events[1]["at"])), "user_disabled",
                           OS_ACTOR, "alice", alice]
    assert rows[0][5] == "—" and rows[4][5] == second
    for output in (as_json.stdout, table.stdout):
        assert not [name for name, token in tokens.items() if secret_of(token) in output], output


def test_on_the_store_the_options_filter_and_page(env: dict[str, str]) -> None:
    offboarding_on_the_store(env)
    every = json.loads(done(["audit", "--json"], env))

    def listed(*options: str) -> list[int]:
        return [event["id"] for event in json.loads(done(["audit", "--json", *options], env))]

    assert listed("--user", "ROOT") == [every[-1]["id"]]
    assert listed("--user", OS_ACTOR) == [event["id"] for event in every]  # the actor: every change here
    assert listed("--kind", "user_added", "--kind", "token_revoked") == [
        event["id"] for event in every if event["kind"] in ("user_added", "token_revoked")]
    assert listed("--since", "1h") == listed() == [event["id"] for event in every]
    assert listed("--since", f"@{every[2]['at']}") == [event["id"] for event in every[:3]]
    assert listed("--since", "2999-01-01") == []
    nothing = invoke(["audit", "--user", "zed"], env)
    assert nothing.exit_code == 0 and nothing.stdout.startswith("no changes to users or tokens that match in the store")

    first = invoke(["audit", "--limit", "3"], env)
    assert [row[0] for row in table_rows(first.stdout)] == [str(event["id"]) for event in every[:3]]
    assert first.stdout.rstrip().endswith(f"older changes left out: add --before-id {every[2]['id']}"), first.stdout
    assert listed("--limit", "3", "--before-id", str(every[2]["id"])) == [event["id"] for event in every[3:6]]
    paged = invoke(["audit", "--json", "--limit", "3"], env)  # the JSON stays a list: the note goes to stderr
    assert len(json.loads(paged.stdout)) == 3 and f"add --before-id {every[2]['id']}" in paged.stderr
    last = invoke(["audit", "--limit", "3", "--before-id", str(every[5]["id"])], env)
    assert "older changes left out" not in last.output and len(table_rows(last.stdout)) == 2


def test_an_empty_log_says_so(env: dict[str, str]) -> None:
    empty = invoke(["audit"], env)
    assert empty.exit_code == 0 and empty.stdout.startswith("no changes to users or tokens in the store "), empty.output
    assert done(["audit", "--json"], env) == "[]"


def test_the_cli_actor_names_an_account_without_a_passwd_entry_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's uid often has no passwd entry: the login name the environment gives, else the uid."""
    from spotrun.cli.accounts import store_actor

    assert store_actor() == OS_ACTOR

    def no_entry(uid: int) -> None:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setenv("LOGNAME", "builder")
    assert store_actor() == f"cli:builder@{socket.gethostname()}"
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    assert store_actor() == f"cli:uid {os.geteuid()}@{socket.gethostname()}"


# ---- over a server ---------------------------------------------------------------------------------------------------

def as_user(team: Team, name: str) -> dict[str, str]:
    return {"SPOTRUN_TOKEN": team.tokens[name], "COLUMNS": "300"}


def test_over_a_server_an_admin_reads_the_log_as_the_store_shows_it(
    team: Team, served: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    zed = done(["user", "add", "zed"], as_user(team, "root"))
    done(["token", "create", "alice"], as_user(team, "alice"))
    done(["user", "disable", "bob"], as_user(team, "root"))

    remote = invoke(["audit", "--json"], as_user(team, "root"))

    assert remote.exit_code == 0, remote.output
    events = json.loads(remote.stdout)
    assert [(e["kind"], e["actor"], e["user"]) for e in events] == [
        ("user_disabled", "root", "bob"), ("token_created", "alice", "alice"), ("user_added", "root", "zed")]
    assert events[0]["revoked_tokens"] == [prefix_of(team.tokens["bob"])]
    table = invoke(["audit"], as_user(team, "root"))
    assert table.stdout.startswith("changes to users and tokens on the server at http://testserver, newest first:")
    assert [row[2:5] for row in table_rows(table.stdout)] == [[e["kind"], e["actor"], e["user"]] for e in events]
    secrets = [secret_of(token) for token in (zed, *team.tokens.values())]
    assert not [secret for secret in secrets for said in (remote.output, table.output) if secret in said]
    assert not [url for url in served for secret in secrets if secret in url]

    # the same log read from the store itself: the same events, and the store's own changes named by the OS account
    monkeypatch.delenv("SPOTRUN_SERVER")
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", team.store.url)
    assert done(["audit", "--json"], {"COLUMNS": "300"}) == remote.stdout.strip()
    done(["user", "enable", "bob"], {"COLUMNS": "300"})
    monkeypatch.setenv("SPOTRUN_SERVER", "http://testserver")
    newest = json.loads(done(["audit", "--json", "--limit", "1"], as_user(team, "root")))
    assert [(e["kind"], e["actor"], e["user"]) for e in newest] == [("user_enabled", OS_ACTOR, "bob")]


def test_over_a_server_the_options_are_sent_as_its_query(team: Team, served: list[str]) -> None:
    done(["user", "add", "zed"], as_user(team, "root"))
    done(["user", "disable", "zed"], as_user(team, "root"))
    served.clear()

    listed = invoke(["audit", "--user", "zed", "--kind", "user_disabled", "--kind", "user_added", "--since",
                     "2020-01-01", "--limit", "1", "--json"], as_user(team, "root"))

    assert listed.exit_code == 0, listed.output
    newest = json.loads(listed.stdout)
    assert [(e["kind"], e["user"]) for e in newest] == [("user_disabled", "zed")]
    assert served[0].split("?", 1)[1] == "user=zed&kind=user_disabled&kind=user_added&since=1577836800.0&limit=1"
    assert f"add --before-id {newest[0]['id']}" in listed.stderr
    older = json.loads(done(["audit", "--json", "--user", "zed", "--before-id", str(newest[0]["id"])],
                            as_user(team, "root")))
    assert [(e["kind"], e["user"]) for e in older] == [("user_added", "zed")]


def test_over_a_server_a_non_admin_is_refused(team: Team, served: list[str]) -> None:
    for arguments in (["audit"], ["audit", "--user", "alice"], ["audit", "--json"]):
        refused = invoke(arguments, as_user(team, "alice"))
        assert refused.exit_code == 1 and "answered 403: only an admin may do this" in " ".join(refused.stderr.split())
        assert refused.stdout == ""


def test_a_server_without_an_audit_log_is_named_older(team: Team, served: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spotrun.cli.remote_accounts.new_http_client", lambda: TestClient(FastAPI()))
    older = invoke(["audit"], as_user(team, "root"))
    assert older.exit_code == 1, older.output
    assert "the server at http://testserver keeps no audit log it can show (a spotrun older than this one)" in \
        " ".join(older.stderr.split())
