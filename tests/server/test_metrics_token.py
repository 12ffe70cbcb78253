"""/metrics (the fleet's job counts by state, preemptions, dollars spent and saved) asks for SPOTRUN_METRICS_TOKEN as
a bearer token when that is set (Prometheus's `authorization: {credentials: ...}`), and for nothing when it is not
(test_server_metrics.py scrapes without a token)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from spotrun.cli.main import app as cli
from spotrun.config import InvalidSetting
from spotrun.server import serve as serve_module
from spotrun.server.app import create_app
from spotrun.server.serve import METRICS_TOKEN_VAR, metrics_token_from_env

TOKEN = "scrape-0123456789abcdef"

# The token is checked before the store is read: one database is enough.
on_sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def guarded(store):
    with TestClient(create_app(store, metrics_token=TOKEN)) as client:
        yield client


WITHOUT_THE_TOKEN = [
    None, "", "Bearer", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN,
    b"Bearer \xe9",  # a header byte past ASCII: hmac.compare_digest refuses a str holding one, with a TypeError
]


@on_sqlite
def test_a_scrape_without_the_metrics_token_is_401(guarded):
    for authorization in WITHOUT_THE_TOKEN:  # one app for all: each costs a store and a client
        response = guarded.get("/metrics", headers={} if authorization is None else {"Authorization": authorization})
        assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer", authorization
        assert "spotrun_" not in response.text


@on_sqlite
def test_a_scrape_with_the_metrics_token_is_answered(guarded):
    for scheme in ("Bearer", "bearer"):
        response = guarded.get("/metrics", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert response.status_code == 200 and "spotrun_jobs" in response.text


@pytest.mark.parametrize(("value", "allowed"), [
    ("too-short", "at least 16 characters"),
    ("sixteen or more but spaced", "should match pattern"),
])
def test_a_metrics_token_the_server_cannot_use_is_refused_without_showing_it(monkeypatch, value, allowed):
    monkeypatch.setenv(METRICS_TOKEN_VAR, value)
    with pytest.raises(InvalidSetting) as refused:
        metrics_token_from_env()
    assert METRICS_TOKEN_VAR in str(refused.value) and allowed in str(refused.value)
    assert value not in str(refused.value)


@on_sqlite
def test_the_server_stops_before_it_listens_on_a_metrics_token_it_cannot_use(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(serve_module.uvicorn.Server, "run", lambda *_, **__: None)  # serve nothing, return at once
    result = CliRunner().invoke(cli, ["server", "--port", "0", "--database-url", store.url, "--no-controller"],
                                env={METRICS_TOKEN_VAR: "short", "COLUMNS": "300"})
    assert result.exit_code == 2 and METRICS_TOKEN_VAR in result.output, result.output
