"""The instance's startup script (EC2 user data): install spotrun, then exec the boot command.

The rendering is shared by every cloud (`spotrun.providers.startup`); EC2's part is its user-data limit and
SPOTRUN_CLOUD=aws, which makes the agent watch IMDSv2 for the spot interruption notice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spotrun.providers.startup import AGENT_LOG, CLOUD_ENV_VAR, INSTANCE_DISK, encoded_within_limit, render_bootstrap

# EC2 refuses user data over 16 KiB (before base64).
MAX_USER_DATA_BYTES = 16 * 1024


def render_startup_script(
    user_data: Mapping[str, Any],
    install_command: str,
    python: str,
    instance_disk: str = INSTANCE_DISK,
    agent_log: str = AGENT_LOG,
) -> str:
    """A bash script for cloud-init that installs spotrun with `install_command` and execs the boot command.

    The agent runs in `instance_disk` (its SPOTRUN_INSTANCE_DISK) and writes its output to `agent_log`.
    """
    script = render_bootstrap(
        user_data,
        install_command=install_command,
        python=python,
        instance_disk=instance_disk,
        agent_log=agent_log,
        comment="spotrun instance bootstrap, rendered by spotrun.providers.aws",
        env_before_boot={CLOUD_ENV_VAR: "aws"},
    )
    encoded_within_limit(script, MAX_USER_DATA_BYTES, "EC2 user data")
    return script
