"""`spotrun prune-logs`: the logs of jobs that ended before the cutoff go; everything else stays as it was."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import Result
from sqlalchemy import func, select
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.control import log_retention
from spotrun.control.log_retention import prune_logs, stored_log_bytes
from spotrun.control.logs import append_chunk, legacy_log_path, read_log
from spotrun.server.logstream import job_log_stream
from spotrun.state import Attempt, Event, Job, LogChunk, Store

DAY = 86400.0
NOW = 1_800_000_000.0


def seed_job(store: Store, *, state: str, finished_days_ago: float | None, logs: list[bytes]) -> int:
    """A job with one attempt per entry of `logs`, each attempt's log that text (sent in two chunks)."""
    with store.session() as session:
        finished = None if finished_days_ago is None else NOW - finished_days_ago * DAY
        job = Job(name="j", owner="alice", spec={"name": "j", "run": "train"}, state=state, created_at=NOW - 90 * DAY,
                  updated_at=finished or NOW, finished_at=finished)
        session.add(job)
        session.flush()
        for number, _ in enumerate(logs, start=1):
            session.add(Attempt(
                job_id=job.id, number=number, state="ended" if finished else "running", provider="local",
                zone="local-a", market="spot", instance_type="local.cpu", price_per_hour=0.1,
                on_demand_price_per_hour=0.3, client_token=f"ct-{job.id}-{number}", token_hash="x",
                instance_id=f"li-{job.id}-{number}", created_at=NOW - 90 * DAY, started_at=NOW - 90 * DAY,
                ended_at=finished, log_bytes=0,
            ))
        job_id = job.id
    with store.session() as session:
        attempts = session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)).all()
        for attempt, text in zip(attempts, logs):
            half = len(text) // 2
            append_chunk(session, attempt.id, 0, text[:half])
            append_chunk(session, attempt.id, half, text[half:])
    return job_id


def log_of(store: Store, job_id: int) -> bytes:
    with store.session() as session:
        attempts = session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)).all()
        return b"|".join(read_log(session, attempt) for attempt in attempts)


def test_only_the_logs_of_jobs_ended_before_the_cutoff_go(store):
    old = seed_job(store, state="SUCCEEDED", finished_days_ago=40, logs=[b"first try\n", b"second try\n"])
    old_failed = seed_job(store, state="FAILED", finished_days_ago=31, logs=[b"boom\n"])
    recent = seed_job(store, state="SUCCEEDED", finished_days_ago=5, logs=[b"recent\n"])
    running = seed_job(store, state="RUNNING", finished_days_ago=None, logs=[b"still going\n"])

    pruned = prune_logs(store, ended_before=NOW - 30 * DAY, now=NOW)

    assert (pruned.jobs, pruned.attempts, pruned.bytes) == (2, 3, len(b"first try\nsecond try\nboom\n"))
    assert log_of(store, old) == b"|" and log_of(store, old_failed) == b""
    assert log_of(store, recent) == b"recent\n" and log_of(store, running) == b"still going\n"
    with store.session() as session:
        assert stored_log_bytes(session) == len(b"recent\nstill going\n")
        attempts = session.scalars(select(Attempt).where(Attempt.job_id == old)).all()
        assert [(a.log_pruned_at, a.log_bytes) for a in attempts] == [(NOW, 10), (NOW, 11)]
        [event] = session.scalars(select(Event).where(Event.job_id == old, Event.kind == "logs_pruned")).all()
        assert event.data == {"attempts": 2, "bytes": 21}
        assert session.get(Job, old).state == "SUCCEEDED"  # the job and its attempts stay


def test_a_dry_run_counts_and_removes_nothing(store):
    job_id = seed_job(store, state="CANCELLED", finished_days_ago=60, logs=[b"x" * 1000])

    pruned = prune_logs(store, ended_before=NOW - 30 * DAY, now=NOW, dry_run=True)

    assert (pruned.jobs, pruned.attempts, pruned.bytes) == (1, 1, 1000)
    assert log_of(store, job_id) == b"x" * 1000
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Event).where(Event.kind == "logs_pruned")) == 0


def test_a_second_run_finds_nothing_more_and_batches_cover_every_job(store, monkeypatch):
    monkeypatch.setattr(log_retention, "JOBS_PER_BATCH", 2)
    ids = [seed_job(store, state="SUCCEEDED", finished_days_ago=40 + i, logs=[b"log\n"]) for i in range(5)]

    first = prune_logs(store, ended_before=NOW - 30 * DAY, now=NOW)
    again = prune_logs(store, ended_before=NOW - 30 * DAY, now=NOW + 1)

    assert (first.jobs, first.attempts) == (5, 5) and (again.jobs, again.attempts, again.bytes) == (0, 0, 0)
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(LogChunk)) == 0
        assert {a.log_pruned_at for a in session.scalars(select(Attempt).where(Attempt.job_id.in_(ids)))} == {NOW}


def test_two_runs_at_once_prune_each_log_once(store, monkeypatch):
    job_id = seed_job(store, state="SUCCEEDED", finished_days_ago=40, logs=[b"once\n"])
    inside, release, results = threading.Event(), threading.Event(), {}
    record_event = log_retention.add_event

    def held_in_its_transaction(*args, **kwargs):
        inside.set()
        release.wait(10)
        return record_event(*args, **kwargs)

    monkeypatch.setattr(log_retention, "add_event", held_in_its_transaction)

    def run(name: str, now: float) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.__setitem__(name, prune_logs(
            store, ended_before=NOW - 30 * DAY, now=now)))
        thread.start()
        return thread

    first = run("first", NOW)
    assert inside.wait(10)
    second = run("second", NOW + 1)
    second.join(0.5)
    assert second.is_alive()  # waiting for the first run's transaction
    release.set()
    first.join(10), second.join(10)

    assert (results["first"].attempts, results["second"].attempts) == (1, 0)
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Event).where(Event.kind == "logs_pruned")) == 1
        assert session.scalar(select(Attempt.log_pruned_at).where(Attempt.job_id == job_id)) == NOW


def test_the_log_stream_says_the_log_was_removed(store):
    job_id = seed_job(store, state="SUCCEEDED", finished_days_ago=40, logs=[b"hello\n"])
    prune_logs(store, ended_before=NOW - 30 * DAY, now=NOW)

    text = "".join(job_log_stream(store, job_id, follow=False))

    assert "attempt 1" in text and "hello" not in text
    # the store keeps no word of which removed it: a server's --keep-logs was named `spotrun prune-logs`
    assert ("[its log of 6 bytes was removed on 2027-01-15 08:00 UTC by log retention (`spotrun prune-logs` or the "
            "server's --keep-logs)]") in text, text


def test_a_log_kept_as_a_file_before_the_store_held_logs_goes_too(store, tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path))
    job_id = seed_job(store, state="SUCCEEDED", finished_days_ago=40, logs=[b"in the store\n"])
    with store.session() as session:
        attempt = session.scalar(select(Attempt).where(Attempt.job_id == job_id))
        file = legacy_log_path(job_id, attempt.number)
    file.parent.mkdir(parents=True)
    file.write_bytes(b"from a file\n")

    prune_logs(store, ended_before=NOW - 30 * DAY, now=NOW)

    assert not file.exists() and log_of(store, job_id) == b""


@pytest.mark.parametrize("older_than", ["soon", "-3d", ""])
def test_the_command_refuses_a_bad_age_by_name_and_changes_nothing(store, older_than):
    job_id = seed_job(store, state="SUCCEEDED", finished_days_ago=400, logs=[b"kept\n"])

    result = spotrun(store, "prune-logs", "--older-than", older_than)

    assert result.exit_code == 2 and "--older-than" in result.stderr, result.output  # a bad argument
    assert log_of(store, job_id) == b"kept\n"


@pytest.mark.parametrize(("older_than", "seconds"), [("30", "30"), ("0", "0"), ("59m", "3540")])
def test_the_command_refuses_an_age_under_an_hour_as_the_server_does(store, older_than, seconds):
    """`--older-than 30`, meant as days, removed the logs of every job that ended more than 30 seconds ago."""
    a_day_ago = (NOW - time.time()) / DAY + 1  # seed_job counts back from NOW, which is ahead of the clock
    job_id = seed_job(store, state="SUCCEEDED", finished_days_ago=a_day_ago, logs=[b"kept\n"])

    result = spotrun(store, "prune-logs", "--older-than", older_than)

    assert result.exit_code == 2, result.output
    assert (f"--older-than must be at least 1h; got {older_than!r} ({seconds} s; a bare number is seconds)"
            in one_line(result.stderr)), result.stderr
    assert log_of(store, job_id) == b"kept\n"


def test_the_command_prunes_and_says_how_much(store):
    job_id = seed_job(store, state="SUCCEEDED", finished_days_ago=400, logs=[b"y" * 2048])

    dry = spotrun(store, "prune-logs", "--older-than", "30d", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would remove the logs of 1 attempt(s) of 1 job(s)" in one_line(dry.stdout), dry.stdout
    cutoff = datetime.fromtimestamp(time.time() - 30 * DAY, timezone.utc)  # the command's own clock, give a minute
    assert any(f"that ended before {(cutoff - timedelta(minutes=late)).strftime('%Y-%m-%d %H:%M')} UTC (" in dry.stdout
               for late in (0, 1)), dry.stdout  # UTC, as the log headers say: it named no zone
    assert log_of(store, job_id) == b"y" * 2048

    done = spotrun(store, "prune-logs", "--older-than", "30d")
    assert done.exit_code == 0, done.output
    said = one_line(done.stdout)
    assert "removed the logs of 1 attempt(s) of 1 job(s)" in said and "(2.0 KiB)" in said, said
    assert log_of(store, job_id) == b""


def spotrun(store: Store, *args: str) -> Result:
    """The command run in this process, on the test's store (a subprocess took ~1 s more, for its imports)."""
    result = CliRunner().invoke(app, list(args), env={"SPOTRUN_DATABASE_URL": store.url})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def one_line(text: str) -> str:
    """The output as one line: the console wraps it at its width."""
    return " ".join(text.split())
