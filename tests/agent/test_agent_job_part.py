"""The job's part of the agent's configuration (run, setup, workdir, env) comes from the controller, not the user
data; the agent keeps a copy only its user can read, for a second boot, and drops it once the attempt is done."""

from __future__ import annotations

import json
import stat

import pytest

from spotrun.agent.config import AgentConfig
from spotrun.agent.job_part import JobPartUnavailable, complete_config, kept_copy_path

from .conftest import TOKEN, agent_config

PART = {"run": "echo hi", "setup": "true", "workdir": "/tmp", "env": {"API_KEY": "k-123"}}


def boot_config(controller, tmp_path) -> AgentConfig:
    return AgentConfig.model_validate(agent_config(controller.url, tmp_path / "store", run=None))


def instance(tmp_path) -> dict[str, str]:
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    return {"SPOTRUN_INSTANCE_DISK": str(disk)}


def test_a_boot_config_gets_its_job_part_from_the_controller_under_its_token(controller, tmp_path):
    controller.replies["job"] = PART
    environ = instance(tmp_path)

    config = complete_config(boot_config(controller, tmp_path), environ)

    assert (config.run, config.setup, config.workdir, config.env) == ("echo hi", "true", "/tmp", {"API_KEY": "k-123"})
    assert config.token.get_secret_value() == TOKEN and config.attempt_id == 41
    [request] = controller.of("job")
    assert request.authorization == f"Bearer {TOKEN}"
    copy = kept_copy_path(config, environ)
    assert json.loads(copy.read_text()) == PART
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600 and stat.S_IMODE(copy.parent.stat().st_mode) == 0o700
    assert copy.parent != config.command_cwd(environ)  # not among the command's files


def test_a_second_boot_starts_from_the_kept_copy_without_asking(controller, tmp_path):
    controller.replies["job"] = PART
    environ = instance(tmp_path)
    complete_config(boot_config(controller, tmp_path), environ)
    controller.force_status["job"] = 410  # the agent reported started: the controller hands out nothing more

    again = complete_config(boot_config(controller, tmp_path), environ)

    assert again.env == {"API_KEY": "k-123"} and len(controller.of("job")) == 1


def test_a_torn_copy_is_ignored_and_the_part_asked_for_again(controller, tmp_path):
    controller.replies["job"] = PART
    environ = instance(tmp_path)
    config = boot_config(controller, tmp_path)
    kept_copy_path(config, environ).parent.mkdir()
    kept_copy_path(config, environ).write_text('{"run": "echo hi", "env"')

    assert complete_config(config, environ).run == "echo hi"
    assert len(controller.of("job")) == 1 and json.loads(kept_copy_path(config, environ).read_text()) == PART


def test_the_controller_away_at_boot_is_waited_for(controller, tmp_path):
    controller.replies["job"] = PART
    controller.fail_before["job"] = 2  # 503 twice, as while the controller restarts

    assert complete_config(boot_config(controller, tmp_path), instance(tmp_path)).run == "echo hi"


def test_a_refusal_names_the_attempt_and_keeps_nothing(controller, tmp_path):
    controller.force_status["job"] = 410
    environ = instance(tmp_path)
    config = boot_config(controller, tmp_path)

    with pytest.raises(JobPartUnavailable, match="attempt 41"):
        complete_config(config, environ)
    assert not kept_copy_path(config, environ).exists()


@pytest.mark.parametrize("answer", [{"run": ""}, {"run": "true", "workdir": "relative"}, {"run": "true", "extra": 1}])
def test_an_answer_that_is_not_a_job_part_is_refused_by_name(controller, tmp_path, answer):
    controller.replies["job"] = answer

    with pytest.raises(JobPartUnavailable, match="invalid"):
        complete_config(boot_config(controller, tmp_path), instance(tmp_path))


def test_a_config_that_holds_its_command_asks_nothing(controller, tmp_path):
    config = AgentConfig.model_validate(agent_config(controller.url, tmp_path / "store", run="true"))

    assert complete_config(config, instance(tmp_path)) is config and controller.requests == []


def test_the_agent_runs_the_fetched_command_with_its_env_and_drops_the_copy(controller, run_agent):
    controller.replies["job"] = {"run": 'echo "key=$API_KEY"', "env": {"API_KEY": "k-123"}}
    agent = run_agent(controller.url, run=None)

    assert agent.wait() == 0
    assert controller.log_text() == "key=k-123\n"
    assert [r.endpoint for r in controller.requests][:2] == ["job", "started"]
    kept = agent.disk / ".spotrun"
    assert kept.is_dir() and list(kept.iterdir()) == []  # it was kept while the attempt ran, and dropped
    assert "k-123" not in agent.stderr


def test_an_agent_refused_its_job_part_fails_the_attempt_saying_why_in_its_log(controller, run_agent):
    """Not an agent the controller never hears from, lost at the boot timeout with the reason on the instance."""
    controller.force_status["job"] = 410
    agent = run_agent(controller.url, run=None)

    assert agent.wait() == 0
    assert [r.endpoint for r in controller.requests][:2] == ["job", "started"]
    assert "did not hand out the job's part of attempt 41" in controller.log_text()
    assert controller.of("exit")[-1].body == {
        "outcome": "failed", "exit_code": None, "checkpoint_synced": False, "nothing_to_back_up": True,
    }
