"""`spotrun user` and `spotrun token` on the store: a token is shown once, at creation, and never echoed back."""

from __future__ import annotations

from pathlib import Path

import pytest
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
