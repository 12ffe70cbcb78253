"""The agent: the process on each instance that restores checkpoints, runs the user's command, heartbeats,
watches for preemption notices, backs checkpoints up and reports to the controller over its HTTP API."""

from spotrun.agent.config import AgentConfig, AgentConfigError, load_config
from spotrun.agent.supervisor import Agent, ExitReport

__all__ = ["Agent", "AgentConfig", "AgentConfigError", "ExitReport", "load_config"]
