"""`spotrun user` and `spotrun token` on the store: a token is shown once, at creation, and never echoed back."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli.main import app


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
