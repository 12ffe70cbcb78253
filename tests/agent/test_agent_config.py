"""AgentConfig: where it comes from, what it rejects, how its paths resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spotrun.agent.__main__ import main
from spotrun.agent.config import AgentConfigError, load_config

VALID = {
    "controller_url": "http://127.0.0.1:8000/",
    "token": "t0k3n",
    "job_id": 1,
    "attempt_id": 2,
    "attempt_number": 0,
    "run": "python train.py",
    "checkpoint_store": "s3://bucket/job-1",
}


def test_config_from_environment_with_defaults():
    config = load_config(None, {"SPOTRUN_AGENT_CONFIG": json.dumps(VALID)})
    assert config.controller_url == "http://127.0.0.1:8000"
    assert config.token.get_secret_value() == "t0k3n"
    assert "t0k3n" not in repr(config)
    assert (config.heartbeat_interval, config.sync_interval, config.notice_grace, config.sync_margin) == (
        1.0, 30.0, 30.0, 2.0
    )
    assert config.storage_options == {} and config.setup is None


def test_config_file_wins_over_the_environment(tmp_path: Path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({**VALID, "job_id": 9}))
    assert load_config(str(path), {"SPOTRUN_AGENT_CONFIG": json.dumps(VALID)}).job_id == 9


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"run": ""}, "run"),
        ({"workdir": "relative/dir"}, "workdir"),
        ({"controller_url": "ftp://x"}, "controller_url"),
        ({"heartbeat_interval": 0}, "heartbeat_interval"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_config_names_the_field(change, named):
    with pytest.raises(AgentConfigError, match=named):
        load_config(None, {"SPOTRUN_AGENT_CONFIG": json.dumps({**VALID, **change})})


def test_missing_or_unparsable_config_says_so(tmp_path: Path):
    with pytest.raises(AgentConfigError, match="SPOTRUN_AGENT_CONFIG"):
        load_config(None, {})
    with pytest.raises(AgentConfigError, match="not valid JSON"):
        load_config(None, {"SPOTRUN_AGENT_CONFIG": "{nope"})
    with pytest.raises(AgentConfigError, match="cannot read"):
        load_config(str(tmp_path / "absent.json"), {})


def test_checkpoint_dir_is_relative_to_the_instance_disk(tmp_path: Path):
    config = load_config(None, {"SPOTRUN_AGENT_CONFIG": json.dumps({**VALID, "checkpoint_dir": "ck"})})
    disk = {"SPOTRUN_INSTANCE_DISK": str(tmp_path)}
    assert config.local_checkpoint_dir(disk) == tmp_path / "ck"
    assert config.command_cwd(disk) == tmp_path
    absolute = config.model_copy(update={"checkpoint_dir": str(tmp_path / "abs"), "workdir": "/srv"})
    assert absolute.local_checkpoint_dir(disk) == tmp_path / "abs"
    assert absolute.command_cwd(disk) == Path("/srv")


def test_main_exits_2_on_a_bad_config(tmp_path: Path, caplog):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({**VALID, "attempt_id": "two"}))
    assert main(["--config", str(path)]) == 2
    assert "attempt_id" in caplog.text


def test_settings_only_a_newer_controller_knows_leave_a_config_to_report_the_failure_with():
    """An image with an older spotrun: its agent refused the whole config and exited, an attempt that never reported
    in; the controller launched another, and another, each lost."""
    newer = {**VALID, "a_future_setting": 1, "gang": {"nnodes": 2, "node_rank": 1, "a_future_gang_setting": "x"}}
    with pytest.raises(AgentConfigError, match="does not know the settings gang.a_future_gang_setting, a_future_setting") as err:
        load_config(None, {"SPOTRUN_AGENT_CONFIG": json.dumps(newer)})
    assert err.value.usable is not None and err.value.usable.gang.node_rank == 1
    assert "install the controller's version" in str(err.value)
    with pytest.raises(AgentConfigError, match="attempt_id") as err:  # wrong besides: nothing to go on
        load_config(None, {"SPOTRUN_AGENT_CONFIG": json.dumps({**newer, "attempt_id": "two"})})
    assert err.value.usable is None


def test_a_refusal_is_in_the_validators_words_without_pydantics_prefix():
    """It read "controller_url: Value error, must be a URL starting with http://", pydantic's prefix leaking."""
    with pytest.raises(AgentConfigError) as refused:
        load_config(None, {"SPOTRUN_AGENT_CONFIG": json.dumps({**VALID, "controller_url": "ftp://x"})})
    assert "controller_url: must be a URL starting with http:// or https://, got 'ftp://x'" in str(refused.value)
    assert "Value error" not in str(refused.value)
