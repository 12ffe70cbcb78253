"""The instance's startup script (GCE metadata `startup-script`): install spotrun, then exec the boot command.

The controller hands every provider the same boot command, ``{"argv": [...], "env": {...}}`` (see
``spotrun.control.boot.user_data``), built for processes on the controller's machine. On an instance, argv[0]
(the controller's interpreter) becomes the instance's Python, and PATH (the controller's) is left out. The env
carries the agent's token, so the script never echoes it: no ``set -x``, values only in ``export`` lines, and
the agent's output goes to a root-only log file. GCE's guest agent runs the script as root at boot.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

# GCE refuses a metadata value over 256 KiB.
MAX_METADATA_VALUE_BYTES = 256 * 1024
INSTANCE_DISK = "/var/lib/spotrun"
AGENT_LOG = "/var/log/spotrun-agent.log"
CLOUD_ENV = {"SPOTRUN_CLOUD": "gcp"}  # tells the agent which metadata server announces preemption
# Variables that only make sense on the controller's machine.
CONTROLLER_ONLY_ENV = frozenset({"PATH"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PYTHON = re.compile(r"python[0-9.]*")


def render_startup_script(
    user_data: Mapping[str, Any],
    install_command: str,
    python: str,
    instance_disk: str = INSTANCE_DISK,
    agent_log: str = AGENT_LOG,
) -> str:
    """A bash script that installs spotrun with `install_command` and execs the boot command with its env.

    The agent runs in `instance_disk` (its SPOTRUN_INSTANCE_DISK) and writes its output to `agent_log`.
    """
    argv = _argv(user_data)
    env = {**_env(user_data), **CLOUD_ENV}
    lines = [
        "#!/bin/bash",
        "# spotrun instance bootstrap, rendered by spotrun.providers.gcp",
        "set -euo pipefail",
        "umask 077",
        f"mkdir -p {shlex.quote(instance_disk)}",
        f"cd {shlex.quote(instance_disk)}",
        install_command,
        f"export SPOTRUN_INSTANCE_DISK={shlex.quote(instance_disk)}",
        *_path_line(python),
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
        f"exec {shlex.join(_on_instance(argv, python))} >>{shlex.quote(agent_log)} 2>&1",
        "",
    ]
    script = "\n".join(lines)
    size = len(script.encode())
    if size > MAX_METADATA_VALUE_BYTES:
        raise ValueError(f"startup script is {size} bytes; a GCE metadata value is limited to {MAX_METADATA_VALUE_BYTES} bytes")
    return script


def _argv(user_data: Mapping[str, Any]) -> list[str]:
    argv = user_data.get("argv") if isinstance(user_data, Mapping) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(part, str) for part in argv):
        raise ValueError("user_data must be {'argv': [str, ...], 'env': {str: str}}; 'argv' is not a non-empty list of strings")
    return argv


def _env(user_data: Mapping[str, Any]) -> dict[str, str]:
    env = user_data.get("env", {})
    if not isinstance(env, Mapping):
        raise ValueError("user_data 'env' must be a mapping of variable names to string values")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"user_data 'env' has an invalid variable name {name!r}")
        if not isinstance(value, str):
            raise ValueError(f"user_data 'env' value of {name} must be a string, got {type(value).__name__}")
    return {name: value for name, value in env.items() if name not in CONTROLLER_ONLY_ENV}


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
