"""The instance's startup script (GCE metadata `startup-script`): install spotrun, then exec the boot command.

The rendering is shared by every cloud (`spotrun.providers.startup`); GCE's part is its metadata value limit
and SPOTRUN_CLOUD=gcp. GCE's guest agent runs the script as root at boot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spotrun.providers.startup import AGENT_LOG, CLOUD_ENV_VAR, INSTANCE_DISK, encoded_within_limit, render_bootstrap

# GCE refuses a metadata value over 256 KiB.
MAX_METADATA_VALUE_BYTES = 256 * 1024
CLOUD_ENV = {CLOUD_ENV_VAR: "gcp"}  # tells the agent which metadata server announces preemption


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
    script = render_bootstrap(
        user_data,
        install_command=install_command,
        python=python,
        instance_disk=instance_disk,
        agent_log=agent_log,
        comment="spotrun instance bootstrap, rendered by spotrun.providers.gcp",
        env_over_boot=CLOUD_ENV,
    )
    encoded_within_limit(script, MAX_METADATA_VALUE_BYTES, "a GCE metadata value")
    return script
