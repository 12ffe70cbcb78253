"""The bash startup script every cloud provider renders from the controller's boot command.

The controller hands every provider the same boot command, ``{"argv": [...], "env": {...}}`` (see
``spotrun.control.boot.user_data``), built for processes on the controller's machine. On an instance, argv[0]
(the controller's interpreter) becomes the instance's Python, and PATH (the controller's) is left out. The env
carries the agent's token (the job's run, setup and env are not in it: the agent fetches them, see
``spotrun.agent.job_part``), so the script never echoes it: no ``set -x``, values only in ``export`` lines, and
the agent's output goes to a root-only log file.

Each cloud's own ``startup`` module adds what differs (which cloud the agent runs on, its size limit). This
module imports no cloud SDK, so every provider can use it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from spotrun.providers.base import LaunchInvalid

INSTANCE_DISK = "/var/lib/spotrun"
AGENT_LOG = "/var/log/spotrun-agent.log"
# Read by spotrun.agent.cloud_notices to pick the notice source to watch.
CLOUD_ENV_VAR = "SPOTRUN_CLOUD"
# Where spotrun.control.boot puts the agent's configuration (spotrun.agent.config reads it).
AGENT_CONFIG_ENV_VAR = "SPOTRUN_AGENT_CONFIG"
# Variables that only make sense on the controller's machine.
CONTROLLER_ONLY_ENV = frozenset({"PATH"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PYTHON = re.compile(r"python[0-9.]*")


def render_bootstrap(
    user_data: Mapping[str, Any],
    *,
    install_command: str,
    python: str,
    instance_disk: str,
    agent_log: str | None,
    comment: str,
    env_before_boot: Mapping[str, str] | None = None,
    env_over_boot: Mapping[str, str] | None = None,
    export_boot_env: bool = True,
) -> str:
    """A bash script that installs spotrun with `install_command` and execs the boot command with its env.

    The agent runs in `instance_disk` (its SPOTRUN_INSTANCE_DISK) with `python` first on PATH, and writes its
    output to `agent_log` (None: to the script's own output). `comment` is the script's second line.
    `env_before_boot` is exported before the boot env (which may set the same names again); `env_over_boot`
    replaces the boot env's values. `export_boot_env=False` leaves the boot env out of the script, for a
    runtime that sets it apart (a Kubernetes secret).
    """
    argv = boot_argv(user_data)
    env = {**boot_env(user_data), **(env_over_boot or {})} if export_boot_env else {}
    output = f" >>{shlex.quote(agent_log)} 2>&1" if agent_log is not None else ""
    lines = [
        "#!/bin/bash",
        f"# {comment}",
        "set -euo pipefail",
        "umask 077",
        f"mkdir -p {shlex.quote(instance_disk)}",
        f"cd {shlex.quote(instance_disk)}",
        install_command,
        _export("SPOTRUN_INSTANCE_DISK", instance_disk),
        *(_export(name, value) for name, value in (env_before_boot or {}).items()),
        *_path_line(python),
        *(_export(name, value) for name, value in env.items()),
        f"exec {shlex.join(_on_instance(argv, python))}{output}",
        "",
    ]
    return "\n".join(lines)


def encoded_within_limit(script: str, max_bytes: int, limit_of: str) -> bytes:
    """`script` as UTF-8, refused when it is over `max_bytes` (the limit of `limit_of`, e.g. "EC2 user data")."""
    raw = script.encode()
    if len(raw) > max_bytes:
        raise LaunchInvalid(
            f"startup script is {len(raw)} bytes; {limit_of} is limited to {max_bytes} bytes (the install command and "
            "the agent's boot configuration travel in it)"
        )
    return raw


def boot_argv(user_data: Mapping[str, Any]) -> list[str]:
    """The boot command's argv, refused unless it is a non-empty list of strings."""
    argv = user_data.get("argv") if isinstance(user_data, Mapping) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(part, str) for part in argv):
        raise ValueError("user_data must be {'argv': [str, ...], 'env': {str: str}}; 'argv' is not a non-empty list of strings")
    return argv


def boot_env(user_data: Mapping[str, Any]) -> dict[str, str]:
    """The boot command's env without the controller-only variables, refused unless names and values are valid."""
    env = user_data.get("env", {})
    if not isinstance(env, Mapping):
        raise ValueError("user_data 'env' must be a mapping of variable names to string values")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"user_data 'env' has an invalid variable name {name!r}")
        if not isinstance(value, str):
            raise ValueError(f"user_data 'env' value of {name} must be a string, got {type(value).__name__}")
    return {name: value for name, value in env.items() if name not in CONTROLLER_ONLY_ENV}


def job_id_of(user_data: Mapping[str, Any]) -> str | None:
    """The job id from the agent configuration the controller puts in the boot env, when there is one."""
    env = user_data.get("env") if isinstance(user_data, Mapping) else None
    raw = env.get(AGENT_CONFIG_ENV_VAR) if isinstance(env, Mapping) else None
    try:
        job_id = json.loads(raw).get("job_id") if isinstance(raw, str) else None
    except (ValueError, AttributeError):
        return None
    return str(job_id) if job_id is not None else None


def _export(name: str, value: str) -> str:
    return f"export {name}={shlex.quote(value)}"


def _path_line(python: str) -> list[str]:
    """Put an absolute interpreter's folder first on PATH, so `python` in the job's command means it."""
    if not os.path.isabs(python):
        return []
    return [f'export PATH={shlex.quote(os.path.dirname(python))}:"$PATH"']


def _on_instance(argv: Sequence[str], python: str) -> list[str]:
    """argv with a Python interpreter of the controller's machine replaced by the instance's."""
    if _PYTHON.fullmatch(os.path.basename(argv[0])):
        return [python, *argv[1:]]
    return list(argv)
