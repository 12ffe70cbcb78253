"""`spotrun server --keep-logs`: the server prunes the logs of jobs that ended longer ago, at start and every round
after, on its own thread; a round that fails is logged and the next one goes on."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_log_retention import DAY, NOW, log_of, seed_job
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.server.log_pruner import LogPruner
from spotrun.state import Store


def test_a_round_prunes_what_ended_before_the_retention_and_says_so(store, caplog):
    old = seed_job(store, state="SUCCEEDED", finished_days_ago=31, logs=[b"old\n"])
    recent = seed_job(store, state="SUCCEEDED", finished_days_ago=29, logs=[b"recent\n"])
    caplog.set_level(logging.INFO, logger="spotrun.server.log_pruner")

    pruned = LogPruner(store, 30 * DAY, clock=lambda: NOW).prune_once()

    assert (pruned.jobs, pruned.attempts, pruned.bytes) == (1, 1, 4)
    assert log_of(store, old) == b"" and log_of(store, recent) == b"recent\n"
    assert "removed the logs of 1 attempt(s) of 1 job(s), 4 bytes" in caplog.text


class RoundsKept(LogPruner):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list = []

    def prune_once(self):
        self.rounds.append(super().prune_once())
        return self.rounds[-1]


def test_the_thread_prunes_at_start_and_again_each_round_until_stopped(store):
    job = seed_job(store, state="SUCCEEDED", finished_days_ago=29, logs=[b"kept a while\n"])
    now = [NOW]
    pruner = RoundsKept(store, 30 * DAY, every=0.05, clock=lambda: now[0])
    rounds = pruner.rounds
    thread = threading.Thread(target=pruner.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(rounds) >= 2)
        assert log_of(store, job) == b"kept a while\n" and rounds[0].attempts == 0
        now[0] = NOW + 2 * DAY  # the job has now ended 31 days ago
        wait_for(lambda: log_of(store, job) == b"")
    finally:
        pruner.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert sum(round_.attempts for round_ in rounds) == 1  # pruned once, by one round


def test_a_round_against_a_store_that_is_away_logs_and_returns(caplog):
    away = Store("postgresql+psycopg://spotrun@127.0.0.1:1/nothing", migrate=False)
    try:
        with caplog.at_level(logging.WARNING, logger="spotrun.server.log_pruner"):
            assert LogPruner(away, DAY, every=60).prune_once() is None
    finally:
        away.dispose()
    assert "pruning logs failed, next try in 60 s" in caplog.text


@pytest.mark.parametrize(("value", "message"), [
    ("30", "{given} must be at least 1h; got '30' (30 s; a bare number is seconds)"),
    ("soon", "{given} must be a duration like"),
    ("-1d", "{given} must not be negative"),
])
@pytest.mark.parametrize("given", ["--keep-logs", "SPOTRUN_KEEP_LOGS"])
def test_the_server_refuses_a_retention_it_cannot_mean(tmp_path, monkeypatch, value, message, given):
    """Set in the environment, the refusal named the option the user had not given, not the variable."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPOTRUN_KEEP_LOGS", raising=False)
    option, env = (["--keep-logs", value], {}) if given.startswith("--") else ([], {given: value})
    result = CliRunner().invoke(app, ["server", "--port", "0", *option], env={**env, "COLUMNS": "300"})
    said = result.output.replace("\n", "")
    assert result.exit_code == 2 and message.format(given=given) in said, said  # a bad argument
    assert not (tmp_path / "home").exists()  # refused before any store was opened


def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.02)


def test_spotrun_server_with_keep_logs_prunes_on_its_own(sqlite_url, tmp_path):
    store = Store(sqlite_url)
    days_ago = (NOW - time.time()) / DAY  # seed_job counts back from NOW, which is ahead of the clock
    old = seed_job(store, state="SUCCEEDED", finished_days_ago=days_ago + 2, logs=[b"two days old\n"])
    young = seed_job(store, state="SUCCEEDED", finished_days_ago=days_ago + 0.5, logs=[b"half a day old\n"])
    env = {**os.environ, "SPOTRUN_HOME": str(tmp_path / "home"), "SPOTRUN_DATABASE_URL": sqlite_url}
    server = subprocess.Popen(
        [sys.executable, "-m", "spotrun.cli.main", "server", "--port", "0", "--no-controller", "--keep-logs", "1d"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        wait_for(lambda: log_of(store, old) == b"", seconds=30)
        assert log_of(store, young) == b"half a day old\n"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        _, errors = server.communicate(timeout=15)
        store.dispose()
    assert "removed the logs of 1 attempt(s) of 1 job(s), 13 bytes" in errors
