"""The CLI's refusals are one error line and a non-zero exit, never a traceback: a store that cannot be opened, an
address the server cannot listen on, numbers out of range, a preemption with a notice that is no number of seconds.
`status ID` says why a job failed, and why the controller cannot go on with one."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.main import app
from spotrun.control import jobs as jobs_api
from spotrun.control.states import JobState
from spotrun.spec import parse_spec
from spotrun.state import Event, Job, add_event

WIDE = {"COLUMNS": "300"}


def refused(arguments: list[str], code: int = 1, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, arguments, env={**WIDE, **(env or {})})
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.output.replace("\n", "")


@pytest.mark.parametrize(
    ("env", "message", "code"),
    [({"SPOTRUN_DATABASE_URL": "foo://bar"}, "SPOTRUN_DATABASE_URL=foo://bar is refused: Can't load plugin", 2),
     ({"SPOTRUN_DATABASE_URL": "garbage"}, "SPOTRUN_DATABASE_URL='garbage' is refused: Could not parse", 2),
     ({"SPOTRUN_DATABASE_URL": "foo://who:secret@host/x"}, "SPOTRUN_DATABASE_URL=foo://who:***@host/x is refused", 2),
     ({"SPOTRUN_DATABASE_URL": "postgresql+psycopg://who:secret@127.0.0.1:1/x"},
      "cannot open the store postgresql+psycopg://who:***@127.0.0.1:1/x: connection failed", 1),
     ({"SPOTRUN_HOME": "/dev/null/x"}, "cannot open the store under $SPOTRUN_HOME: [Errno 20] Not a directory", 1)],
)
def test_a_store_that_cannot_be_opened_is_one_line(home: Path, env: dict[str, str], message: str, code: int) -> None:
    """A URL that cannot be one is a bad setting (exit 2), as a missing driver is; a database that does not answer
    is not (exit 1)."""
    said = refused(["status"], code=code, env=env)
    assert message in said and "secret" not in said


def test_a_database_file_that_is_not_one_is_refused_and_left_as_it_was(home: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("my notes")
    assert "file is not a database" in refused(["status"], env={"SPOTRUN_DATABASE_URL": f"sqlite:///{notes}"})
    assert notes.read_text() == "my notes"


def test_a_store_a_newer_spotrun_migrated_is_one_line_and_left_as_it_was(home: Path) -> None:
    refused(["status", "999"])  # makes the store; job 999 does not exist
    database = home / "state.db"
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099'")
    before = database.read_bytes()
    said = refused(["status"])
    assert "is at schema revision '0099', which this spotrun does not know" in said and "Traceback" not in said
    assert database.read_bytes() == before


def test_the_server_refuses_a_port_it_cannot_listen_on(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in refused(
            ["server", "--port", str(port), "--no-controller"])
    assert "Invalid value for '--port'" in refused(["server", "--port", "-1"], code=2)
    assert "Invalid value for '--port'" in refused(["server", "--port", "65536"], code=2)


@pytest.mark.parametrize("option", [["--tick-interval", "-1"], ["--tick-interval", "0"], ["--idle-exit", "-5"],
                                    ["--tick-interval", "inf"], ["--tick-interval", "1e300"]])
def test_the_controller_refuses_intervals_below_its_floor(home: Path, option: list[str]) -> None:
    assert f"Invalid value for '{option[0]}'" in refused(["controller", *option], code=2)


@pytest.mark.parametrize("interval", ["inf", "1e300", "0"])
def test_the_server_refuses_a_tick_interval_out_of_bounds(home: Path, interval: str) -> None:
    """inf was taken: every round of the controller's loop then failed with an OverflowError, logged."""
    assert "Invalid value for '--tick-interval'" in refused(["server", "--port", "0", "--tick-interval", interval],
                                                            code=2)


def test_the_daemon_refuses_a_tick_interval_past_an_hour() -> None:
    from spotrun.server import daemon

    with pytest.raises(SystemExit):
        daemon.main(["--tick-interval", "1e300"])


def _job(home: Path) -> int:
    spec = parse_spec("name: t\nrun: 'true'\nresources: {cloud: local, instance_type: local.cpu}\n")
    return jobs_api.submit(EmbeddedBackend().store, spec, time.time())


@pytest.mark.parametrize("notice", ["nan", "-1", "inf", "3601"])
def test_a_preemption_notice_that_is_no_number_of_seconds_is_refused(home: Path, notice: str) -> None:
    job_id = _job(home)
    said = refused(["preempt", str(job_id), "--notice", notice], code=2)
    assert "--notice must be between 0 and 3600 seconds" in said
    with EmbeddedBackend().store.session() as session:
        assert session.query(Event).filter_by(job_id=job_id, kind="chaos").count() == 0


def test_status_of_one_job_says_why_it_failed_or_why_it_is_stuck(home: Path) -> None:
    failed, stuck = _job(home), _job(home)
    store = EmbeddedBackend().store
    with store.session() as session:
        job = session.get(Job, failed)
        job.state, job.failure_reason = JobState.FAILED.value, "none of the job's zones is offered"
        add_event(session, at=time.time(), kind="stuck", job_id=stuck,
                  message="the controller cannot go on with this job (ValueError: no AWS region)")
    runner = CliRunner()
    assert "reason: none of the job's zones is offered" in runner.invoke(app, ["status", str(failed)], env=WIDE).output
    shown = runner.invoke(app, ["status", str(stuck)], env=WIDE).output
    assert "stuck: the controller cannot go on with this job (ValueError: no AWS region)" in shown


def test_launch_names_every_problem_of_a_job_file_with_its_line_and_stores_nothing(home: Path, tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text("name: bad\nrun: python train.py\nresources:\n  nodes: 17\nworkdir: nowhere\n"
                   "spot:\n  policy: magic\n  deadline: 1h\nestimated_duration: 2h\n")
    said = refused(["launch", str(job)], code=2)
    for expected in (f"{job}:4: resources.nodes: 17 nodes", f"{job}:5: workdir: ", f"{job}:7: spot.policy: unknown",
                     f"{job}:8: spot.deadline: leaves 1 h"):
        assert expected in said, said
    with EmbeddedBackend().store.session() as session:
        assert session.query(Job).count() == 0


def test_launch_refuses_a_zone_the_local_cloud_does_not_have_and_stores_nothing(home: Path, tmp_path: Path) -> None:
    job = tmp_path / "typo.yaml"
    job.write_text("run: python train.py\nspot:\n  zones: [local-a, local-z]\n")
    said = refused(["launch", str(job)], code=2)
    assert f"{job}:3: spot.zones[1]: unknown zone 'local-z'; the local cloud's zones are local-a, local-b, local-c" \
        in said, said
    with EmbeddedBackend().store.session() as session:
        assert session.query(Job).count() == 0


def named_pipe(folder: Path, text: str) -> Path:
    """A named pipe that gives `text` to its first reader (`spotrun launch <(...)`, `mkfifo`)."""
    pipe = folder / "piped.yaml"
    os.mkfifo(pipe)
    threading.Thread(target=pipe.write_text, args=(text,), daemon=True).start()
    return pipe


@pytest.mark.parametrize(("command", "text", "said"), [
    (["launch"], "run: x\nspot: {zones: [nowhere]}\n", "piped.yaml:2: spot.zones[0]: unknown zone 'nowhere'"),
    (["simulate", "--job"], "run: x\nestimated_duration: 1h\nspot: {deadline: 2001-01-01T00:00:00Z}\n",
     "piped.yaml:3: spot.deadline: must be after now"),
])
def test_a_job_file_on_a_named_pipe_is_read_once_and_its_problems_located(
    home: Path, tmp_path: Path, command: list[str], text: str, said: str,
) -> None:
    """A problem found after parsing had the file read again for its line: a pipe has nothing more to give, and the
    command waited for it forever."""
    pipe = named_pipe(tmp_path, text)
    result = subprocess.run([sys.executable, "-m", "spotrun.cli.main", *command, str(pipe)], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "SPOTRUN_HOME": str(home), **WIDE})
    assert result.returncode == 2, result.stderr
    assert said in result.stderr, result.stderr


@pytest.mark.parametrize(("written", "field"), [
    ("workdir: '~nosuchuser/x'", "workdir"), ("checkpoint: {store: '~nosuchuser/x'}", "checkpoint.store"),
    ("resources: {cloud: aws, instance_type: m5.large, prices: {on_demand: 1, spot: 0.5}}\n"
     "checkpoint: {store: '~nosuchuser/x'}", "checkpoint.store"),
])
def test_launch_refuses_the_home_folder_of_a_user_this_machine_lacks(
    home: Path, tmp_path: Path, written: str, field: str,
) -> None:
    """It ended in a traceback (RuntimeError: Could not determine home directory), exit 1."""
    job = tmp_path / "tilde.yaml"
    job.write_text(f"run: x\n{written}\n")
    said = refused(["launch", str(job)], code=2)
    assert f"{field}: '~nosuchuser/x' starts with ~nosuchuser, but this machine has no user 'nosuchuser'" in said
    with EmbeddedBackend().store.session() as session:
        assert session.query(Job).count() == 0


def test_a_spotrun_home_of_a_user_this_machine_lacks_is_a_bad_setting(home: Path) -> None:
    said = refused(["status"], code=2, env={"SPOTRUN_HOME": "~nosuchuser/spotrun"})
    assert "SPOTRUN_HOME: '~nosuchuser/spotrun' starts with ~nosuchuser, but this machine has no user" in said


@pytest.mark.parametrize("age", ["1000000d", "99999999999999999999999d"])
def test_prune_logs_refuses_an_age_past_the_longest_duration(home: Path, age: str) -> None:
    """It was taken, and the cutoff it printed (before 1970, before year 1) failed with a traceback."""
    assert "--older-than must be at most 3650d (10 years)" in refused(["prune-logs", "--older-than", age], code=2)


@pytest.mark.parametrize("server", ["http://[::1", "http://host:port", "http://host\x01"])
def test_a_server_url_that_is_no_url_is_one_line(home: Path, server: str) -> None:
    """A setting no command can use: exit 2 (README's Commands), not 1."""
    said = refused(["status"], code=2, env={"SPOTRUN_SERVER": server, "SPOTRUN_TOKEN": "t"})
    assert f"SPOTRUN_SERVER is not a URL ({server!r}):" in said and "Traceback" not in said


@pytest.mark.parametrize(("server", "message"), [
    ("127.0.0.1:41011", "SPOTRUN_SERVER='127.0.0.1:41011' is refused: it must start with http:// or https:// "
                        "(http://127.0.0.1:41011?)"),
    ("trainbox", "SPOTRUN_SERVER='trainbox' is refused: it must start with http:// or https://"),
    ("localhost:8080", "SPOTRUN_SERVER='localhost:8080' is refused: it must start with http:// or https:// "
                       "(http://localhost:8080?)"),
    ("ftp://trainbox", "SPOTRUN_SERVER='ftp://trainbox' is refused: it must be an http:// or https:// URL with a host"),
    ("http:///spotrun", "SPOTRUN_SERVER='http:///spotrun' is refused: it must be an http:// or https:// URL with a host"),
    ("http://trainbox:8080/api/v1", "SPOTRUN_SERVER='http://trainbox:8080/api/v1' is refused: SPOTRUN_SERVER is the "
                                    "server's base URL, as `spotrun server` prints it, without /api/v1 "
                                    "(http://trainbox:8080)"),
    ("https://gw/spotrun/api/v1/", "without /api/v1 (https://gw/spotrun)"),
])
def test_a_server_url_no_server_has_is_a_bad_setting_naming_it(home: Path, server: str, message: str) -> None:
    """`127.0.0.1:41011` was exit 1 with httpx's "Request URL is missing an 'http://' or 'https://' protocol", and
    the API's own path answered "404: Not Found"."""
    for command in (["status"], ["cancel", "1"], ["logs", "1"]):
        said = refused(command, code=2, env={"SPOTRUN_SERVER": server, "SPOTRUN_TOKEN": "t"})
        assert said.startswith("error: ") and message in said, said
    assert not home.exists()  # no store was opened for it


def test_launch_refuses_a_bad_controller_setting_at_once(home: Path, tmp_path: Path) -> None:
    """It stored the job, started a controller that exited at its start, waited 30 s for it, and ended in a
    RuntimeError traceback."""
    job = tmp_path / "t.yaml"
    job.write_text("run: 'true'\nresources: {cloud: local, instance_type: local.cpu}\n")
    started = time.monotonic()
    said = refused(["launch", str(job)], code=2, env={"SPOTRUN_HEARTBEAT_TIMEOUT": "abc"})  # a bad setting
    assert "SPOTRUN_HEARTBEAT_TIMEOUT='abc' is refused" in said and "Traceback" not in said
    assert time.monotonic() - started < 20
    with EmbeddedBackend().store.session() as session:
        assert session.query(Job).count() == 0, "refused before it is stored: launched again, it would run twice"


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("SPOTRUN_IDLE_EXIT", "nan", "of at least 0, got nan"),
    ("SPOTRUN_TICK_INTERVAL", "nan", "of at least 0.01 and at most 3600, got nan"),
    ("SPOTRUN_TICK_INTERVAL", "0", "of at least 0.01 and at most 3600, got 0"),
])
def test_launch_refuses_the_daemons_own_timing_settings_before_storing_the_job(
    home: Path, tmp_path: Path, name: str, value: str, allowed: str
) -> None:
    """They were not checked before the job was stored: the controller started for it refused them and exited, and
    launch waited 30 s for it and ended in a RuntimeError traceback, the job left PENDING with nothing to drive it."""
    job = tmp_path / "ok.yaml"
    job.write_text("run: 'true'\n")
    started = time.monotonic()
    said = refused(["launch", str(job)], code=2, env={name: value})
    assert f"{name}={value!r} is refused: must be a number of seconds {allowed}" in said, said
    assert "Traceback" not in said and time.monotonic() - started < 20
    assert not (home / "state.db").exists(), "refused before the store is opened, so nothing is stored"


def test_a_controller_that_does_not_start_is_one_line_naming_its_log(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was a RuntimeError traceback."""
    from spotrun.server import daemon

    monkeypatch.setattr(daemon, "START_TIMEOUT", 0.5)
    monkeypatch.setattr(daemon.sys, "executable", shutil.which("false"))  # a controller that exits at its start
    job = tmp_path / "ok.yaml"
    job.write_text("run: 'true'\n")
    said = refused(["launch", str(job)], code=1)
    log = home / "controller.log"
    assert f"error: job 1 is stored, but the controller did not start within 0.5 s; see {log}" in said, said
    said = refused(["cancel", "1"], code=1)
    assert f"error: the cancel of job 1 is stored, but the controller did not start within 0.5 s; see {log}" in said


def test_status_refuses_another_applications_sqlite_database_and_leaves_it_byte_for_byte(
    home: Path, tmp_path: Path
) -> None:
    """`status`, which only reads, added spotrun's tables to it (and switched it to WAL mode), and said there were
    no jobs yet."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
        connection.execute("INSERT INTO notes VALUES ('mine')")
    connection.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    said = refused(["status"], env={"SPOTRUN_DATABASE_URL": f"sqlite:///{other}"})
    assert f"error: cannot open the store sqlite:///{other}: the database holds tables (notes) but no spotrun " \
           "schema version" in said, said
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("other")) == ["other.db"]


@pytest.mark.parametrize(("url", "driver"), [
    ("mysql://u:secret@127.0.0.1:1/db", "MySQLdb"),
    ("postgresql+psycopg2://u@127.0.0.1:1/db", "psycopg2"),
])
def test_a_database_url_whose_driver_is_not_installed_is_a_bad_setting(home: Path, url: str, driver: str) -> None:
    """It was a ModuleNotFoundError traceback, exit code 1."""
    if importlib.util.find_spec(driver) is not None:
        pytest.skip(f"{driver} is installed here")
    shown = url.replace("secret", "***")
    said = refused(["status"], code=2, env={"SPOTRUN_DATABASE_URL": url})
    assert f"error: SPOTRUN_DATABASE_URL={shown} is refused: its driver {driver} is not installed" in said, said
    assert "Traceback" not in said and "secret" not in said
    said = refused(["server", "--port", "0", "--database-url", url], code=2)
    assert f"error: the database URL {shown} is refused: its driver {driver} is not installed" in said, said


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite+pysqlite:///:memory:",
                                 "sqlite:///file:jobs?mode=memory&uri=true"])
def test_an_in_memory_sqlite_store_is_a_bad_setting(home: Path, tmp_path: Path, url: str) -> None:
    """Each process opens its own empty one, gone at its exit: `status` said "no jobs yet", and `launch` stored the
    job where the controller it started could not see it, waited 30 s for it, and left a daemon on an empty store."""
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: t\nrun: 'true'\n")
    for arguments in (["status"], ["launch", str(job_file)]):
        said = refused(arguments, code=2, env={"SPOTRUN_DATABASE_URL": url})
        assert "error: SPOTRUN_DATABASE_URL=sqlite" in said, said
        assert "is refused: it names an in-memory SQLite database" in said, said
    said = refused(["server", "--port", "0", "--database-url", url], code=2)
    assert "error: the database URL sqlite" in said and "is refused: it names an in-memory SQLite" in said, said
    assert not home.exists() or not (home / "controller.log").exists()


def test_ctrl_c_while_the_controller_starts_names_the_job_stored(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch waits up to 30 s for the controller it starts, after the job is stored: Ctrl-C there exited 130
    saying nothing, and the job went on (the controller is in a session of its own) with its id never shown."""
    from spotrun.server import daemon

    def interrupted(*_args: object, **_kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(daemon, "ensure_running", interrupted)
    job = tmp_path / "ok.yaml"
    job.write_text("run: 'true'\n")
    said = refused(["launch", str(job)], code=130)
    assert "job 1 is stored, but the wait for its controller was interrupted: `spotrun status 1`" in said, said
    said = refused(["cancel", "1"], code=130)
    assert "the cancel of job 1 is stored, but the wait for its controller was interrupted" in said, said
    with EmbeddedBackend().store.session() as session:
        assert session.get(Job, 1).cancel_requested
