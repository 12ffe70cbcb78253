"""The CLI's remote mode end to end: a real `spotrun server` process (API + controller) on a random port, the local
cloud, and the same commands printing the same things as in embedded mode. The commands run in this process
(Click's test runner): what is compared is what they print and their exit codes, and a `spotrun` process for each cost
~1 s of CPU, mostly imports (14 of them were most of this test's time)."""

from __future__ import annotations

import json
import os
import pwd
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import Spotrun, TeamServer
from click.testing import Result
from sqlalchemy import select as sql_select
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.state import Event, LogChunk


# `sleep 1` rather than `true`: a command that ends before the controller's next tick trips a controller bug
# (IllegalTransition PROVISIONING -> SUCCEEDED), reported to the lead.
SHORT_JOB = """
name: tiny
run: "sleep 1"
resources: {cloud: local, instance_type: local.cpu}
"""


@pytest.fixture
def spotrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spotrun]:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    world = Spotrun(tmp_path / "home")
    yield world
    world.shutdown()


@pytest.fixture
def server(spotrun: Spotrun) -> Iterator[TeamServer]:
    team_server = TeamServer(spotrun)
    yield team_server
    team_server.stop()


def cli(env: dict[str, str], *args: str) -> Result:
    """`spotrun ARGS` with `env` as its whole environment, run in this process."""
    unset = {name: None for name in os.environ if name not in env}
    result = CliRunner().invoke(app, list(args), env={**env, **unset})
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
    return result


def test_remote_mode_runs_a_job_and_prints_what_embedded_mode_prints(
    spotrun: Spotrun, server: TeamServer, tmp_path: Path
) -> None:
    added = cli(spotrun.env, "user", "add", "alice")
    assert added.exit_code == 0, added.stderr
    token = added.stdout.strip()
    remote = {**spotrun.env, "SPOTRUN_SERVER": server.url, "SPOTRUN_TOKEN": token}
    job_file = tmp_path / "tiny.yaml"
    job_file.write_text(SHORT_JOB)

    launched = cli(remote, "launch", str(job_file), "--follow")
    assert launched.exit_code == 0, launched.stdout + launched.stderr + server.output.read_text()
    assert "launched job 1 (tiny)" in launched.stdout and "job 1 SUCCEEDED after 1 attempt, 0 preemptions" in launched.stdout
    rows = json.loads(cli(remote, "status", "--json").stdout)
    assert [(row["id"], row["state"], row["attempts"]) for row in rows] == [(1, "SUCCEEDED", 1)]

    # The cancel, which would change the job if it were wrongly let through, runs remotely first.
    for command in (("status", "1", "--json"), ("cost", "1"), ("logs", "1"), ("cancel", "1"), ("status", "7")):
        by_server, by_store = cli(remote, *command), cli(spotrun.env, *command)
        assert (by_server.exit_code, by_server.stdout, by_server.stderr) == (
            by_store.exit_code, by_store.stdout, by_store.stderr), command

    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'spotrun_jobs{state="SUCCEEDED"} 1.0' in metrics
    assert "spotrun_dollars_spent" in metrics

    refused = cli({**remote, "SPOTRUN_TOKEN": "spr_abc_wrong"}, "status")
    assert refused.exit_code == 1 and "refused the token in SPOTRUN_TOKEN" in " ".join(refused.stderr.split())

    server.stop()
    assert_no_credential_leaked(spotrun, token)


def assert_no_credential_leaked(spotrun: Spotrun, token: str) -> None:
    store = spotrun.store()
    with store.session() as session:
        texts = [message + json.dumps(data) for message, data in session.execute(sql_select(Event.message, Event.data))]
        texts += [data.decode(errors="replace") for data in session.scalars(sql_select(LogChunk.data))]  # the logs
    store.dispose()
    texts += [f"{path}: " + path.read_text(errors="replace") for path in spotrun.home.rglob("*.log")]
    secret_prefix = token.split("_", 2)[2][:12]  # the secret itself may contain "_"
    assert texts
    leaks = [text[max(0, text.find(secret_prefix) - 300) : text.find(secret_prefix) + 100] for text in texts
             if token in text or secret_prefix in text]
    assert not leaks, f"the token's secret {secret_prefix!r} is stored: {leaks}"


def test_users_are_made_through_the_server_and_its_access_log_writes_no_tokens_secret(
    spotrun: Spotrun, server: TeamServer
) -> None:
    """The first admin is made on the server's machine (no SPOTRUN_SERVER), the others through the server; a token
    pasted into the revoke URL is revoked, and the access log writes it cut to its prefix."""
    root = cli(spotrun.env, "user", "add", "root", "--admin")
    assert root.exit_code == 0 and "made in the store sqlite:///" in root.stderr, root.stderr
    remote = {**spotrun.env, "SPOTRUN_SERVER": server.url, "SPOTRUN_TOKEN": root.stdout.strip()}
    zed = cli(remote, "user", "add", "zed")
    assert zed.exit_code == 0 and f"made on the server at {server.url}" in zed.stderr, zed.stderr
    token = zed.stdout.strip()
    as_zed = {**remote, "SPOTRUN_TOKEN": token}
    assert cli(as_zed, "status").exit_code == 0

    revoked = httpx.post(f"{server.url}/api/v1/tokens/{token}/revoke", headers={"Authorization": f"Bearer {token}"})
    assert revoked.status_code == 200, revoked.text
    assert cli(as_zed, "status").exit_code == 1

    # the audit log, read through the server: the first admin's making on the store is in it, by the OS account
    audit = cli(remote, "audit", "--json")
    assert audit.exit_code == 0, audit.stderr
    prefix = token.split("_")[1]
    assert [(e["kind"], e["actor"], e["user"], e["token_prefix"]) for e in json.loads(audit.stdout)] == [
        ("token_revoked", "zed", "zed", prefix), ("user_added", "root", "zed", prefix),
        ("user_added", f"cli:{pwd.getpwuid(os.geteuid()).pw_name}@{socket.gethostname()}", "root",
         root.stderr.split()[1]),
    ]
    assert token.split("_", 2)[2] not in audit.stdout

    server.stop()
    access_log = server.process.stdout.read()
    _, prefix, secret = token.split("_", 2)
    assert f"/api/v1/tokens/spr_{prefix}_.../revoke" in access_log, access_log
    assert secret not in access_log and secret[:8] not in access_log
