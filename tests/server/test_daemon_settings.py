"""The SPOTRUN_* settings the controller daemon reads are checked as it starts: one it cannot use stops it with an
error naming the variable, its value and what is allowed, before it takes the lease (and `spotrun controller` and
`spotrun server` with it)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.server import daemon
from spotrun.server import serve as serve_module
from spotrun.server.daemon import LEASE_NAME, Daemon, InvalidSetting, settings_from_env
from spotrun.state import lease

REFUSED = [
    # 0 made every round fail, for ever, dividing by it (the controller's sweep)
    ("SPOTRUN_SWEEP_EVERY_TICKS", "0", "greater than or equal to 1"),
    ("SPOTRUN_SWEEP_EVERY_TICKS", "2.5", "valid integer"),
    ("SPOTRUN_HEARTBEAT_TIMEOUT", "ten", "valid number"),
    ("SPOTRUN_HEARTBEAT_TIMEOUT", "nan", "finite number"),
    ("SPOTRUN_CLAIM_TTL", "inf", "finite number"),
    ("SPOTRUN_LAUNCH_TIMEOUT", "0", "greater than 0"),
    ("SPOTRUN_BACKOFF_BASE", "-5", "greater than or equal to 0"),
    ("SPOTRUN_MARKET_HISTORY_TRIES", "-1", "greater than or equal to 0"),
]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    for name in ("SPOTRUN_SERVER", "SPOTRUN_CONTROLLER_URL", "SPOTRUN_TICK_INTERVAL", "SPOTRUN_IDLE_EXIT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


@pytest.mark.parametrize(("name", "value", "allowed"), REFUSED)
def test_a_controller_setting_it_cannot_use_is_refused_naming_the_variable(home, monkeypatch, name, value, allowed):
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidSetting) as refused:
        settings_from_env("http://127.0.0.1:1")
    assert f"{name}={value!r}" in str(refused.value) and allowed in str(refused.value)


def test_controller_settings_in_bounds_are_taken(home, monkeypatch):
    monkeypatch.setenv("SPOTRUN_SWEEP_EVERY_TICKS", "3")
    monkeypatch.setenv("SPOTRUN_RECONSIDER_EVERY", "0")
    monkeypatch.setenv("SPOTRUN_HEARTBEAT_TIMEOUT", "12.5")
    settings = settings_from_env("http://127.0.0.1:1")
    assert (settings.sweep_every_ticks, settings.reconsider_every, settings.heartbeat_timeout) == (3, 0.0, 12.5)


@pytest.mark.parametrize(("name", "value", "allowed"), [
    *REFUSED[:3],
    ("SPOTRUN_CONTROLLER_PORT", "8o80", "valid integer"),
    ("SPOTRUN_CONTROLLER_PORT", "70000", "less than or equal to 65535"),
    ("SPOTRUN_CONTROLLER_URL", "10.0.0.5:8080", "URL"),
    ("SPOTRUN_CONTROLLER_URL", "HTTP://10.0.0.5:8080", "starting with http:// or https://"),  # agents refuse it
    ("SPOTRUN_CONTROLLER_BIND", "203.0.113.7", "address (or name) of this machine"),  # an address of no machine here
    ("SPOTRUN_TICK_INTERVAL", "soon", "not a number of seconds"),
    ("SPOTRUN_IDLE_EXIT", "-1", "at least 0"),
])
def test_the_daemon_stops_on_a_setting_it_cannot_use_before_taking_the_lease(store, home, monkeypatch, capsys, name,
                                                                             value, allowed):
    """A value that is no number failed only after the lease was taken, outside the block that gives it back, and
    the error did not name the variable; 0 ticks between sweeps was taken, and every round then failed."""
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", store.url)
    monkeypatch.setenv(name, value)
    monkeypatch.setattr(Daemon, "_loop", lambda *_, **__: pytest.fail(f"the daemon ran with {name}={value}"))
    assert daemon.main([]) == 2
    said = capsys.readouterr().err
    assert f"{name}={value!r}" in said and allowed in said, said
    with store.session() as session:
        assert lease.read(session, LEASE_NAME) is None, "the daemon took the lease"


def test_the_controller_command_exits_non_zero_on_a_setting_it_cannot_use(store, home, monkeypatch):
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", store.url)
    monkeypatch.setattr(Daemon, "_loop", lambda *_, **__: pytest.fail("the daemon ran"))
    result = CliRunner().invoke(app, ["controller"], env={"SPOTRUN_SWEEP_EVERY_TICKS": "0"})
    assert result.exit_code == 2, result.output
    assert "SPOTRUN_SWEEP_EVERY_TICKS='0'" in result.output


def test_the_controller_command_takes_its_tick_and_idle_exit_from_the_environment_unless_given(
    store, home, monkeypatch
):
    """It passed its own defaults (0.5 s, never) over them: SPOTRUN_TICK_INTERVAL and SPOTRUN_IDLE_EXIT never told."""
    monkeypatch.setenv("SPOTRUN_DATABASE_URL", store.url)
    ran_with = []
    monkeypatch.setattr(Daemon, "run", lambda daemon: ran_with.append((daemon.tick_interval, daemon.idle_exit)) or 0)
    refused = CliRunner().invoke(app, ["controller"], env={"SPOTRUN_IDLE_EXIT": "abc"})
    assert refused.exit_code == 2 and "SPOTRUN_IDLE_EXIT='abc'" in refused.output, refused.output
    environment = {"SPOTRUN_TICK_INTERVAL": "0.25", "SPOTRUN_IDLE_EXIT": "90"}
    assert CliRunner().invoke(app, ["controller"], env=environment).exit_code == 0
    assert CliRunner().invoke(app, ["controller", "--tick-interval", "2", "--idle-exit", "5"], env=environment).exit_code == 0
    assert CliRunner().invoke(app, ["controller"], env={"SPOTRUN_TICK_INTERVAL": "", "SPOTRUN_IDLE_EXIT": ""}).exit_code == 0
    assert ran_with == [(0.25, 90.0), (2.0, 5.0), (0.5, 0.0)]


def test_the_server_refuses_a_controller_setting_it_cannot_use(store, home, monkeypatch):
    """The server's controller thread failed every round, logging it, while the server went on serving."""
    monkeypatch.setattr(serve_module.uvicorn.Server, "run", lambda *_, **__: None)  # serve nothing, return at once
    result = CliRunner().invoke(app, ["server", "--port", "0", "--database-url", store.url],
                                env={"SPOTRUN_SWEEP_EVERY_TICKS": "0", "COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "SPOTRUN_SWEEP_EVERY_TICKS='0'" in result.output


def test_a_server_without_controller_does_not_read_the_controller_settings(store, home, monkeypatch):
    monkeypatch.setattr(serve_module.uvicorn.Server, "run", lambda *_, **__: None)
    result = CliRunner().invoke(app, ["server", "--port", "0", "--database-url", store.url, "--no-controller"],
                                env={"SPOTRUN_SWEEP_EVERY_TICKS": "0"})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("option", "env", "refusal"), [
    ([], {"SPOTRUN_PUBLIC_URL": "garbage"}, "SPOTRUN_PUBLIC_URL='garbage' is refused: must be a URL"),
    ([], {"SPOTRUN_PUBLIC_URL": "10.0.0.5:8080"}, "SPOTRUN_PUBLIC_URL='10.0.0.5:8080' is refused"),
    ([], {"SPOTRUN_PUBLIC_URL": "HTTP://10.0.0.5:8080"}, "SPOTRUN_PUBLIC_URL='HTTP://10.0.0.5:8080' is refused"),
    ([], {"SPOTRUN_PUBLIC_URL": "http://10.0.0.5:port"}, "SPOTRUN_PUBLIC_URL='http://10.0.0.5:port' is refused"),
    (["--public-url", "garbage"], {}, "--public-url='garbage' is refused"),
    (["--public-url", "trainbox:8080"], {}, "--public-url='trainbox:8080' is refused: must be a URL starting"),
])
def test_the_server_refuses_a_public_url_agents_cannot_report_to(store, home, monkeypatch, option, env, refusal):
    """It served, saying `listening on garbage` (not the port it took), and told its agents that URL: each refused
    its configuration, and its job stayed PROVISIONING, billed."""
    monkeypatch.delenv("SPOTRUN_PUBLIC_URL", raising=False)
    monkeypatch.setattr(serve_module.uvicorn.Server, "run", lambda *_, **__: pytest.fail("the server served"))
    result = CliRunner().invoke(app, ["server", "--port", "0", "--database-url", store.url, *option],
                                env={**env, "COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert refusal in result.output and "listening" not in result.output
    assert "Value error" not in result.output  # pydantic's prefix to the validator's words


def test_the_server_takes_a_public_url_agents_can_report_to(store, home, monkeypatch):
    monkeypatch.setattr(serve_module.uvicorn.Server, "run", lambda *_, **__: None)
    result = CliRunner().invoke(app, ["server", "--port", "0", "--database-url", store.url, "--no-controller"],
                                env={"SPOTRUN_PUBLIC_URL": "https://gateway.example.org/spotrun"})
    assert result.exit_code == 0, result.output
    assert "spotrun server listening on https://gateway.example.org/spotrun" in result.output
