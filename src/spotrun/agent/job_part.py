"""The job's part of the agent's configuration (run, setup, workdir, env), fetched from the controller at start.

The boot configuration in the user data leaves it out (`spotrun.control.boot`): the cloud keeps user data for the
instance's whole life and shows it to whoever may describe the instance, and the job's env is where its secrets go.
The controller hands the job's part out only until the agent reports started, so the agent keeps a copy that
only its user can read on the instance disk: an instance that boots again (GCE runs its startup script at every
boot) starts its agent from that copy. The copy goes when the agent is done with the attempt.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotrun.agent.client import ControllerClient, Delivery
from spotrun.agent.config import AbsolutePath, AgentConfig, AgentConfigError

log = logging.getLogger(__name__)

ENDPOINT = "job"
KEPT_FOLDER = ".spotrun"


class JobPart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run: str = Field(min_length=1)
    setup: str | None = None
    workdir: AbsolutePath | None = None
    env: dict[str, str] = Field(default_factory=dict)


class JobPartUnavailable(AgentConfigError):
    """The controller refused the job's part, or answered with something that is not one."""


def complete_config(
    config: AgentConfig,
    environ: Mapping[str, str] = os.environ,
    client_for: Callable[[AgentConfig], ControllerClient] | None = None,
) -> AgentConfig:
    """`config` with the job's part filled in: from the instance disk's copy, else from the controller (retried
    while it cannot be reached). A config that already holds its command (a --config file) is returned as it is."""
    if config.run is not None:
        return config
    copy = kept_copy_path(config, environ)
    part = _read_copy(copy)
    if part is None:
        part = _fetch(config, client_for or _client)
        try:
            _keep_copy(copy, part)
        except OSError as exc:  # the copy only serves a second boot; this one can go on without it
            log.warning("cannot keep the job part at %s for a second boot: %s", copy, exc)
    return AgentConfig.model_validate({**config.model_dump(), **part.model_dump()})


def kept_copy_path(config: AgentConfig, environ: Mapping[str, str] = os.environ) -> Path:
    """In a folder of its own: the instance disk is also the command's working folder by default."""
    return config.instance_disk(environ) / KEPT_FOLDER / f"job-{config.job_id}-attempt-{config.attempt_id}.json"


def forget_copy(config: AgentConfig, environ: Mapping[str, str] = os.environ) -> None:
    kept_copy_path(config, environ).unlink(missing_ok=True)


def _client(config: AgentConfig) -> ControllerClient:
    return ControllerClient(config.controller_url, config.token.get_secret_value(), config.attempt_id,
                            alternates=config.controller_urls)


def _fetch(config: AgentConfig, client_for: Callable[[AgentConfig], ControllerClient]) -> JobPart:
    answers: list[dict[str, Any]] = []
    client = client_for(config)
    try:
        delivery = client.get(ENDPOINT, on_reply=answers.append)
    finally:
        client.close()
    if delivery is not Delivery.DELIVERED or not answers:
        raise JobPartUnavailable(
            f"the controller did not hand out the job's part of attempt {config.attempt_id}'s configuration "
            f"({delivery.value}; its answer is logged above)"
        )
    try:
        return JobPart.model_validate(answers[0])
    except ValidationError as exc:
        raise JobPartUnavailable(f"the controller's job part for attempt {config.attempt_id} is invalid: {exc}") from exc


def _read_copy(path: Path) -> JobPart | None:
    try:
        return JobPart.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:  # a torn or foreign file: ask the controller again
        log.warning("ignoring the kept job part %s: %s", path, exc)
        return None


def _keep_copy(path: Path, part: JobPart) -> None:
    """Written whole (a new file renamed over) and readable by this user only: it holds the job's env."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.parent.chmod(0o700)
    partial = path.with_name(f"{path.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a leftover partial file keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(part.model_dump(), file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
