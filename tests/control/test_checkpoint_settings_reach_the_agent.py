"""The job's checkpoint settings travel to the agent in its boot configuration, and the agent takes them."""

from __future__ import annotations

from types import SimpleNamespace

from spotrun.agent.config import AgentConfig
from spotrun.control.boot import agent_config
from spotrun.spec import parse_spec


def agent_config_for(spec_text: str) -> AgentConfig:
    job = SimpleNamespace(id=1, spec=parse_spec(spec_text).to_json())
    attempt = SimpleNamespace(id=7, number=1, node_rank=0, standby_for=None)
    return AgentConfig.model_validate(agent_config(job, attempt, "token", "http://controller", 1.0))


def test_a_jobs_final_backup_timeout_reaches_the_agent():
    """No spec field carried it: a 5 TB checkpoint or a 10-minute cap could not be asked for."""
    config = agent_config_for("run: x\ncheckpoint: {store: /tmp/s, sync_interval: 2m, final_backup_timeout: 10m}\n")
    assert (config.sync_interval, config.final_backup_timeout) == (120.0, 600.0)


def test_without_one_the_agents_default_holds():
    assert agent_config_for("run: x\ncheckpoint: {store: /tmp/s}\n").final_backup_timeout == 6 * 3600.0
