"""The agent's configuration: one JSON document, from $SPOTRUN_AGENT_CONFIG or a file."""

from __future__ import annotations

import json
import os
from importlib import metadata
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from spotrun.pydantic_messages import error_message
from spotrun.user_paths import expand_user

CONFIG_ENV_VAR = "SPOTRUN_AGENT_CONFIG"
INSTANCE_DISK_ENV_VAR = "SPOTRUN_INSTANCE_DISK"
LOG_FLUSH_SECONDS = 10.0


class AgentConfigError(ValueError):
    """The agent's configuration is missing or invalid; the message names what is wrong. ``usable``: the config
    without what this agent does not know, when that is all that is wrong (a newer controller's settings): enough
    to report the attempt failed, saying why, in the job's log."""

    def __init__(self, message: str, usable: AgentConfig | None = None) -> None:
        super().__init__(message)
        self.usable = usable


def _absolute(value: str) -> str:
    if not os.path.isabs(value):
        raise ValueError(f"must be an absolute path, got {value!r}")
    return value


AbsolutePath = Annotated[str, AfterValidator(_absolute)]


def http_url(value: str) -> str:
    """The controller's URL as an agent takes it (ValueError when it cannot): the server checks its own by this."""
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"must be a URL starting with http:// or https://, got {value!r}")
    return value.rstrip("/")


class GangConfig(BaseModel):
    """This node's place in a multi-node job; the generation's master comes in heartbeat answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nnodes: int = Field(ge=2)
    node_rank: int = Field(ge=0)
    launcher: Literal["env", "torchrun"] = "env"
    procs_per_node: int = Field(default=1, ge=1)


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    controller_url: str = Field(min_length=1)
    # other controller workers' agents' APIs, reported to should the one at controller_url be gone (`state.workers`)
    controller_urls: list[str] = Field(default_factory=list, max_length=16)
    token: SecretStr
    job_id: int
    attempt_id: int
    attempt_number: int = Field(ge=0)
    # None in a boot configuration: run, setup, workdir and env are fetched from the controller (agent.job_part).
    run: str | None = Field(default=None, min_length=1, description="bash command of the trainer")
    setup: str | None = None
    workdir: AbsolutePath | None = None
    env: dict[str, str] = Field(default_factory=dict)
    checkpoint_dir: str = "checkpoints"
    checkpoint_store: str = Field(min_length=1, description="fsspec URI or local path")
    heartbeat_interval: float = Field(default=1.0, gt=0)
    sync_interval: float = Field(default=30.0, gt=0)
    notice_poll_interval: float = Field(default=1.0, gt=0, le=5)  # AWS gives 2 min; poll at least every 5 s
    notice_grace: float = Field(default=30.0, ge=0, description="trainer's grace when a notice has no deadline")
    sync_margin: float = Field(
        default=2.0, ge=0, description="seconds before a notice's deadline at which the trainer is killed, kept for "
        "the final backup and, in their last 2 s, the exit report; a gang's node, which backs nothing up, keeps only "
        "the report's part (at most 2 s)"
    )
    final_backup_timeout: float = Field(
        default=6 * 3600.0, gt=0, description="seconds the final backup may take at most, notice or not (a store "
        "that hangs must not hold the exit report for ever; a terabyte of checkpoint at 100 MB/s takes 3 h); the "
        "exit is then reported with checkpoint_synced false"
    )
    log_flush_timeout: float = Field(
        default=LOG_FLUSH_SECONDS, gt=0, description="seconds the job's log may hold the exit report back (no longer "
        "than a notice's deadline leaves), and then the agent's end, while the controller does not take it"
    )
    storage_options: dict[str, Any] = Field(default_factory=dict)
    gang: GangConfig | None = None
    hold: bool = Field(default=False, description="a standby: restore and run only once a heartbeat's answer releases it")

    @field_validator("controller_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("controller_urls")
    @classmethod
    def _http_urls(cls, values: list[str]) -> list[str]:
        return [http_url(value) for value in values]

    def instance_disk(self, environ: Mapping[str, str] = os.environ) -> Path:
        """The instance's scratch disk: $SPOTRUN_INSTANCE_DISK, else the current directory."""
        return Path(environ.get(INSTANCE_DISK_ENV_VAR) or os.getcwd()).resolve()

    def local_checkpoint_dir(self, environ: Mapping[str, str] = os.environ) -> Path:
        path = expand_user(self.checkpoint_dir)
        return path if path.is_absolute() else self.instance_disk(environ) / path

    def command_cwd(self, environ: Mapping[str, str] = os.environ) -> Path:
        return Path(self.workdir) if self.workdir else self.instance_disk(environ)


def parse_config(text: str, origin: str) -> AgentConfig:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AgentConfigError(f"{origin} is not valid JSON: {exc}") from exc
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        unknown = [error["loc"] for error in exc.errors() if error["type"] == "extra_forbidden"]
        if unknown and len(unknown) == len(exc.errors()):
            raise _settings_of_a_newer_controller(data, unknown, origin) from exc
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '<root>'}: {error_message(error)}"
            for error in exc.errors()
        )
        raise AgentConfigError(f"invalid agent config in {origin}: {problems}") from exc


def _settings_of_a_newer_controller(data: dict[str, Any], unknown: list[tuple[Any, ...]], origin: str) -> AgentConfigError:
    """Settings this agent does not know come from a controller of a newer spotrun (an image with an older one
    installed): the attempt cannot run as asked, and is failed, saying so where the job's owner looks."""
    names = ", ".join(".".join(str(part) for part in loc) for loc in unknown)
    message = (
        f"this instance's spotrun agent ({_installed_version()}) does not know the settings {names} in {origin}: "
        "the controller runs a newer spotrun; install the controller's version in the instance's image"
    )
    known = json.loads(json.dumps(data))
    for loc in unknown:
        parent = known
        for part in loc[:-1]:
            parent = parent[part]
        del parent[loc[-1]]
    try:
        return AgentConfigError(message, usable=AgentConfig.model_validate(known))
    except ValidationError:
        return AgentConfigError(message)


def _installed_version() -> str:
    try:
        return f"spotrun {metadata.version('spotrun')}"
    except metadata.PackageNotFoundError:
        return "spotrun of unknown version"


def load_config(config_file: str | None, environ: Mapping[str, str] = os.environ) -> AgentConfig:
    """The config from config_file when given, else from $SPOTRUN_AGENT_CONFIG."""
    if config_file is not None:
        try:
            text = Path(config_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise AgentConfigError(f"cannot read agent config file {config_file}: {exc}") from exc
        return parse_config(text, config_file)
    env_text = environ.get(CONFIG_ENV_VAR)
    if not env_text:
        raise AgentConfigError(f"no agent config: set ${CONFIG_ENV_VAR} (JSON) or pass --config FILE")
    return parse_config(env_text, f"${CONFIG_ENV_VAR}")
