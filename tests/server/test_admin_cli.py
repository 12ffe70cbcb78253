"""`spotrun user` and `spotrun token`: a token is shown once, at creation, and never echoed back; with SPOTRUN_SERVER
set they act on that server through its API (as SPOTRUN_TOKEN's user), else on this machine's store, and say which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from server_world import Team, stored
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.server.users import authenticate
from spotrun.state import Store


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.delenv("SPOTRUN_DATABASE_URL", raising=False)
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    return {"COLUMNS": "300"}


def test_revoking_by_the_whole_token_names_its_id_and_never_prints_the_secret(env: dict[str, str]) -> None:
    runner = CliRunner()
    added = runner.invoke(app, ["user", "add", "alice"], env=env)
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    prefix, secret = token.removeprefix("spr_").split("_", 1)

    revoked = runner.invoke(app, ["token", "revoke", token], env=env)
    assert revoked.exit_code == 0 and f"revoked token {prefix}" in revoked.output, revoked.output
    again = runner.invoke(app, ["token", "revoke", token], env=env)  # revoked already: no live token
    assert again.exit_code == 1 and f"no live token with id {prefix}" in again.output, again.output
    assert secret not in revoked.output + again.output


@pytest.mark.parametrize("mangle", [
    lambda token: token[:-1], lambda token: token + "x", lambda token: token.rsplit("_", 1)[0] + "_wrong",
    lambda token: token.rsplit("_", 1)[0],
], ids=["cut", "extended", "other-secret", "no-secret"])
def test_a_whole_token_whose_secret_is_wrong_is_refused_and_revokes_nothing(env: dict[str, str], mangle) -> None:
    """Its prefix alone chose the token: `spotrun token revoke spr_<prefix>_wrong` revoked the real one."""
    runner = CliRunner()
    token = runner.invoke(app, ["user", "add", "alice"], env=env).stdout.strip()
    prefix, secret = token.removeprefix("spr_").split("_", 1)
    given = mangle(token)

    refused = runner.invoke(app, ["token", "revoke", given], env=env)

    assert refused.exit_code == 2, refused.output
    assert f"the token given is not token {prefix}: its secret does not match" in refused.output, refused.output
    assert "nothing was revoked" in refused.output
    given_secret = given.removeprefix("spr_").partition("_")[2]
    assert secret not in refused.output and (not given_secret or given_secret not in refused.output)
    store = Store()
    try:
        with store.session() as session:
            assert authenticate(session, token) is not None, "the real token was revoked"
    finally:
        store.dispose()
    by_id = runner.invoke(app, ["token", "revoke", prefix], env=env)  # its id alone still revokes it
    assert by_id.exit_code == 0 and f"revoked token {prefix}" in by_id.output, by_id.output


# ---- where they act: the store here, or the server SPOTRUN_SERVER names -------------------------------------------

def test_without_a_server_they_act_on_the_store_and_say_which(env: dict[str, str], tmp_path: Path) -> None:
    """How the first admin is made, on the server's machine."""
    runner = CliRunner()
    added = runner.invoke(app, ["user", "add", "root", "--admin"], env=env)
    assert added.exit_code == 0, added.output
    where = f"in the store sqlite:///{tmp_path / 'home' / 'state.db'}"
    assert f"made {where}; it is shown only this once" in added.stderr, added.stderr
    made = runner.invoke(app, ["token", "create", "root"], env=env)
    assert made.exit_code == 0 and where in made.stderr, made.output
    revoked = runner.invoke(app, ["token", "revoke", prefix_of(made.stdout.strip())], env=env)
    assert revoked.exit_code == 0 and f"revoked token {prefix_of(made.stdout.strip())} {where}" in revoked.stdout


@pytest.mark.postgres
def test_the_store_is_named_without_its_password(
    env: dict[str, str], postgresql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", postgresql_url.replace("postgres@", "postgres:hunter2@"))
    added = CliRunner().invoke(app, ["user", "add", "root"], env=env)
    assert added.exit_code == 0, added.output
    assert "in the store postgresql+psycopg://postgres:***@127.0.0.1:5432/" in added.stderr, added.stderr
    assert "hunter2" not in added.output


def test_the_store_lists_users_and_a_named_users_tokens(env: dict[str, str]) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["user", "list"], env=env)
    assert empty.exit_code == 0 and empty.stdout.startswith("no users in the store sqlite:///"), empty.output
    root = runner.invoke(app, ["user", "add", "root", "--admin"], env=env).stdout.strip()
    alice = runner.invoke(app, ["user", "add", "alice"], env=env).stdout.strip()
    second = runner.invoke(app, ["token", "create", "alice"], env=env).stdout.strip()
    runner.invoke(app, ["token", "revoke", prefix_of(alice)], env=env)

    users = runner.invoke(app, ["user", "list"], env=env)
    assert users.exit_code == 0, users.output
    assert users.stdout.startswith("users in the store sqlite:///"), users.stdout
    rows = table_rows(users.stdout)
    assert [row[0:2] for row in rows] == [["root", "yes"], ["alice", "no"]]
    assert rows[1][3] == f"{prefix_of(alice)} (revoked), {prefix_of(second)}" and rows[0][3] == prefix_of(root)

    tokens = runner.invoke(app, ["token", "list", "ALICE"], env=env)  # found as `token create` finds a user
    assert tokens.exit_code == 0 and tokens.stdout.startswith("tokens of alice in the store"), tokens.output
    assert [(row[0], row[2] != "no") for row in table_rows(tokens.stdout)] == [
        (prefix_of(alice), True), (prefix_of(second), False)]
    for listing in (users.stdout, tokens.stdout):
        assert not [token for token in (root, alice, second) if token.split("_", 2)[2] in listing]

    nobody = runner.invoke(app, ["token", "list"], env=env)  # the store has no caller to default to
    assert nobody.exit_code == 2 and "name the user whose tokens to list" in nobody.stderr, nobody.output
    unknown = runner.invoke(app, ["token", "list", "zed"], env=env)
    assert unknown.exit_code == 1 and "no user named 'zed'" in unknown.stderr, unknown.output


def as_user(team: Team, name: str) -> dict[str, str]:
    return {"SPOTRUN_TOKEN": team.tokens[name], "COLUMNS": "300"}


def signs_in(team: Team, token: str) -> str | None:
    """Whose token the server takes it for; None when it refuses it."""
    response = team.client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    return response.json()["name"] if response.status_code == 200 else None


def test_with_a_server_named_users_and_tokens_are_made_on_it_not_in_the_local_store(
    team: Team, served: list[str], tmp_path: Path
) -> None:
    """They acted on the local store, silently: the token printed was then refused by the server."""
    runner = CliRunner()
    added = runner.invoke(app, ["user", "add", "zed"], env=as_user(team, "root"))
    assert added.exit_code == 0, added.output
    assert "made on the server at http://testserver; it is shown only this once" in added.stderr, added.stderr
    assert signs_in(team, added.stdout.strip()) == "zed"
    made = runner.invoke(app, ["token", "create", "alice"], env=as_user(team, "root"))
    assert made.exit_code == 0 and signs_in(team, made.stdout.strip()) == "alice", made.output
    assert not (tmp_path / "laptop" / "state.db").exists(), "the local store was used"


def test_with_a_server_named_and_no_token_they_refuse_and_say_how_to_act_on_the_store(
    env: dict[str, str], tmp_path: Path
) -> None:
    named = {**env, "SPOTRUN_SERVER": "http://127.0.0.1:9", "SPOTRUN_TOKEN": ""}
    for arguments in (["user", "add", "root", "--admin"], ["token", "list", "root"], ["user", "list"]):
        refused = CliRunner().invoke(app, arguments, env=named)
        assert refused.exit_code == 1, refused.output
        said = " ".join(refused.stderr.split())
        assert "SPOTRUN_TOKEN is not" in said and "unset SPOTRUN_SERVER" in said, said
    assert not (tmp_path / "home" / "state.db").exists(), "the local store was used"


def test_over_a_server_a_non_admin_is_refused_what_only_admins_do_and_nothing_changes(
    team: Team, served: list[str]
) -> None:
    before = stored(team)
    runner = CliRunner()
    for arguments, said in [
        (["user", "add", "carol"], "answered 403: only an admin may do this"),
        (["user", "list"], "answered 403: only an admin may do this"),
        (["token", "create", "bob"], "answered 403: only an admin may act for another user"),
    ]:
        refused = runner.invoke(app, arguments, env=as_user(team, "alice"))
        assert refused.exit_code == 1 and said in " ".join(refused.stderr.split()), (arguments, refused.output)
    assert stored(team) == before
    taken = runner.invoke(app, ["user", "add", "Alice"], env=as_user(team, "root"))
    assert taken.exit_code == 1 and "differs only in case from the existing user 'alice'" in taken.stderr
    bad = runner.invoke(app, ["user", "add", "no spaces"], env=as_user(team, "root"))
    assert bad.exit_code == 2 and "user name 'no spaces' must be 1-200 letters" in bad.stderr
    unknown = runner.invoke(app, ["token", "create", "zed"], env=as_user(team, "root"))
    assert unknown.exit_code == 1 and "no user named 'zed'" in unknown.stderr
    assert stored(team) == before
    own = runner.invoke(app, ["token", "create", "alice"], env=as_user(team, "alice"))
    assert own.exit_code == 0 and signs_in(team, own.stdout.strip()) == "alice"


def test_over_a_server_a_token_is_revoked_there_and_its_secret_never_put_in_a_url(
    team: Team, served: list[str]
) -> None:
    runner = CliRunner()
    second = runner.invoke(app, ["token", "create", "alice"], env=as_user(team, "alice")).stdout.strip()
    before = stored(team)
    mangled = runner.invoke(app, ["token", "revoke", second[:-1]], env=as_user(team, "alice"))
    assert mangled.exit_code == 2, mangled.output
    assert f"the token given is not token {prefix_of(second)}: its secret does not match" in mangled.stderr
    others = runner.invoke(app, ["token", "revoke", team.tokens["bob"]], env=as_user(team, "alice"))
    assert others.exit_code == 1 and "no live token with id" in others.stderr, others.output
    assert stored(team) == before and signs_in(team, second) == "alice" and signs_in(team, team.tokens["bob"]) == "bob"

    revoked = runner.invoke(app, ["token", "revoke", second], env=as_user(team, "alice"))
    assert revoked.exit_code == 0, revoked.output
    assert f"revoked token {prefix_of(second)} on the server at http://testserver" in revoked.stdout
    assert signs_in(team, second) is None
    again = runner.invoke(app, ["token", "revoke", second], env=as_user(team, "alice"))
    assert again.exit_code == 1 and f"no live token with id {prefix_of(second)}" in again.stderr, again.output
    by_admin = runner.invoke(app, ["token", "revoke", prefix_of(team.tokens["bob"])], env=as_user(team, "root"))
    assert by_admin.exit_code == 0 and signs_in(team, team.tokens["bob"]) is None

    secrets = [token.split("_", 2)[2] for token in (second, team.tokens["bob"])]
    assert served and not [url for url in served for secret in (*secrets, secrets[0][:-1]) if secret in url]


def test_over_a_server_an_admin_lists_users_and_anyone_their_own_tokens(team: Team, served: list[str]) -> None:
    runner = CliRunner()
    second = runner.invoke(app, ["token", "create", "alice"], env=as_user(team, "alice")).stdout.strip()
    runner.invoke(app, ["token", "revoke", second], env=as_user(team, "alice"))

    users = runner.invoke(app, ["user", "list"], env=as_user(team, "root"))
    assert users.exit_code == 0 and users.stdout.startswith("users on the server at http://testserver:"), users.output
    rows = table_rows(users.stdout)
    assert [row[:2] for row in rows] == [["alice", "no"], ["bob", "no"], ["root", "yes"]]
    assert rows[0][3] == f"{prefix_of(team.tokens['alice'])}, {prefix_of(second)} (revoked)"

    tokens = runner.invoke(app, ["token", "list"], env=as_user(team, "alice"))
    assert tokens.exit_code == 0, tokens.output
    assert tokens.stdout.startswith("tokens of alice on the server at http://testserver:")
    assert [(row[0], row[2] != "no") for row in table_rows(tokens.stdout)] == [
        (prefix_of(team.tokens["alice"]), False), (prefix_of(second), True)]
    named = runner.invoke(app, ["token", "list", "alice"], env=as_user(team, "alice"))
    assert named.exit_code == 0 and named.stdout == tokens.stdout
    others = runner.invoke(app, ["token", "list", "bob"], env=as_user(team, "alice"))
    assert others.exit_code == 2 and "lists your own tokens" in " ".join(others.stderr.split()), others.output
    for listing in (users.stdout, tokens.stdout):
        assert not [token for token in (*team.tokens.values(), second) if token.split("_", 2)[2] in listing]


def prefix_of(token: str) -> str:
    return token.split("_")[1]


def table_rows(text: str) -> list[list[str]]:
    """The cells of a rich table's body rows."""
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│")]


# ---- offboarding: `user disable` / `user enable` / `user set-admin` ---------------------------------------------------

def test_the_store_disables_a_user_revoking_their_tokens_and_enables_them_without_one(env: dict[str, str]) -> None:
    runner = CliRunner()
    runner.invoke(app, ["user", "add", "root", "--admin"], env=env)
    alice = runner.invoke(app, ["user", "add", "alice"], env=env).stdout.strip()
    second = runner.invoke(app, ["token", "create", "alice"], env=env).stdout.strip()

    disabled = runner.invoke(app, ["user", "disable", "alice"], env=env)

    assert disabled.exit_code == 0, disabled.output
    said = " ".join(disabled.stdout.split())
    assert "alice disabled in the store sqlite:///" in said, said
    assert f"revoked 2 live token(s) ({prefix_of(alice)}, {prefix_of(second)})" in said and "no live jobs" in said
    assert not [token for token in (alice, second) if signs_in_store(token)]
    refused = runner.invoke(app, ["token", "create", "alice"], env=env)
    assert refused.exit_code == 1 and "user 'alice' is disabled" in refused.stderr, refused.output
    rows = table_rows(runner.invoke(app, ["user", "list"], env=env).stdout)
    assert [(row[0], row[4] != "no") for row in rows] == [("root", False), ("alice", True)]

    enabled = runner.invoke(app, ["user", "enable", "alice"], env=env)
    assert enabled.exit_code == 0 and "enabled alice in the store" in enabled.stdout, enabled.output
    assert not signs_in_store(alice)
    made = runner.invoke(app, ["token", "create", "alice"], env=env)
    assert made.exit_code == 0 and signs_in_store(made.stdout.strip()), made.output


@pytest.mark.postgres
def test_the_store_refuses_to_demote_or_disable_its_last_enabled_admin(
    env: dict[str, str], postgresql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", postgresql_url)
    last_admin_refusals(env)


def test_the_sqlite_store_refuses_to_demote_or_disable_its_last_enabled_admin(env: dict[str, str]) -> None:
    last_admin_refusals(env)


def last_admin_refusals(env: dict[str, str]) -> None:
    runner = CliRunner()
    root = runner.invoke(app, ["user", "add", "root", "--admin"], env=env).stdout.strip()
    for arguments in (["user", "set-admin", "root", "--no-admin"], ["user", "disable", "root"]):
        refused = runner.invoke(app, arguments, env=env)
        assert refused.exit_code == 1, (arguments, refused.output)
        assert "cannot" in refused.stderr and "root: they are the last enabled admin" in " ".join(refused.stderr.split())
    assert signs_in_store(root)
    rows = table_rows(runner.invoke(app, ["user", "list"], env=env).stdout)
    assert [row[:2] + row[4:] for row in rows] == [["root", "yes", "no"]]
    runner.invoke(app, ["user", "add", "alice"], env=env)
    made = runner.invoke(app, ["user", "set-admin", "alice", "--admin"], env=env)
    assert made.exit_code == 0 and "alice is an admin in the store" in made.stdout, made.output
    demoted = runner.invoke(app, ["user", "set-admin", "root", "--no-admin"], env=env)
    assert demoted.exit_code == 0 and "root is not an admin in the store" in demoted.stdout, demoted.output
    no_flag = runner.invoke(app, ["user", "set-admin", "root"], env=env)
    assert no_flag.exit_code == 2 and "--admin" in no_flag.stderr


def test_over_a_server_an_admin_offboards_a_user_whose_jobs_run_on(team: Team, served: list[str]) -> None:
    runner = CliRunner()
    team.launch("alice")
    disabled = runner.invoke(app, ["user", "disable", "alice"], env=as_user(team, "root"))
    assert disabled.exit_code == 0, disabled.output
    said = " ".join(disabled.stdout.split())
    assert "alice disabled on the server at http://testserver" in said, said
    assert "their 1 live job(s) keep running: an admin cancels them" in said
    assert signs_in(team, team.tokens["alice"]) is None
    listed = runner.invoke(app, ["user", "list"], env=as_user(team, "root"))
    assert [(row[0], row[4] != "no") for row in table_rows(listed.stdout)] == [
        ("alice", True), ("bob", False), ("root", False)]
    refused = runner.invoke(app, ["token", "create", "alice"], env=as_user(team, "root"))
    assert refused.exit_code == 1 and "user 'alice' is disabled" in refused.stderr, refused.output
    enabled = runner.invoke(app, ["user", "enable", "alice"], env=as_user(team, "root"))
    assert enabled.exit_code == 0 and "enabled alice on the server" in enabled.stdout, enabled.output
    made = runner.invoke(app, ["token", "create", "alice"], env=as_user(team, "root"))
    assert made.exit_code == 0 and signs_in(team, made.stdout.strip()) == "alice"


def test_over_a_server_offboarding_is_admins_and_never_locks_the_last_admin_out(team: Team, served: list[str]) -> None:
    runner = CliRunner()
    before = stored(team)
    for arguments, caller, said in [
        (["user", "disable", "bob"], "alice", "answered 403: only an admin may do this"),
        (["user", "set-admin", "alice", "--admin"], "alice", "answered 403: only an admin may do this"),
        (["user", "disable", "root"], "root", "you cannot disable yourself"),
        (["user", "set-admin", "root", "--no-admin"], "root", "root: they are the last enabled admin"),
        (["user", "enable", "zed"], "root", "no user named 'zed'"),
    ]:
        refused = runner.invoke(app, arguments, env=as_user(team, caller))
        assert refused.exit_code == 1 and said in " ".join(refused.stderr.split()), (arguments, refused.output)
    assert stored(team) == before and signs_in(team, team.tokens["root"]) == "root"
    made = runner.invoke(app, ["user", "set-admin", "bob", "--admin"], env=as_user(team, "root"))
    assert made.exit_code == 0 and "bob is an admin on the server" in made.stdout, made.output


def signs_in_store(token: str) -> bool:
    store = Store()
    try:
        with store.session() as session:
            return authenticate(session, token) is not None
    finally:
        store.dispose()


def test_the_lists_in_json_name_users_and_tokens_by_prefix_only(team: Team, served: list[str]) -> None:
    """For scripts (an offboarding run over every user, say): the tables only were printed."""
    runner = CliRunner()
    users = runner.invoke(app, ["user", "list", "--json"], env=as_user(team, "root"))
    assert users.exit_code == 0, users.output
    listed = {user["name"]: user for user in json.loads(users.stdout)}
    assert sorted(listed) == ["alice", "bob", "root"] and listed["root"]["is_admin"] and listed["alice"]["disabled_at"] is None
    assert [token["prefix"] for token in listed["alice"]["tokens"]] == [prefix_of(team.tokens["alice"])]
    tokens = runner.invoke(app, ["token", "list", "--json"], env=as_user(team, "alice"))
    assert tokens.exit_code == 0, tokens.output
    assert json.loads(tokens.stdout) == {"user": "alice", "tokens": listed["alice"]["tokens"]}
    for listing in (users.stdout, tokens.stdout):
        assert not [token for token in team.tokens.values() if token.split("_", 2)[2] in listing]


def test_a_server_url_no_server_has_is_refused_as_the_other_remote_commands_refuse_it(env: dict[str, str]) -> None:
    """`user` and `token` built their own client and said "is not a URL" (exit 1) where `status` said what is wrong
    (exit 2); one client and one check now (`remote.api_client`)."""
    remote = {**env, "SPOTRUN_SERVER": "127.0.0.1:9", "SPOTRUN_TOKEN": "spr_000000000000_x"}
    for command in (["user", "list"], ["token", "list"], ["status"]):
        result = CliRunner().invoke(app, command, env=remote)
        assert result.exit_code == 2, (command, result.output)
        assert "SPOTRUN_SERVER='127.0.0.1:9' is refused: it must start with http:// or https://" in result.stderr
