"""The VM's custom data: a bash script that cloud-init runs at first boot to install spotrun and exec the agent.

The rendering is shared by every cloud (`spotrun.providers.startup`); Azure's part is the custom-data limit and
base64, SPOTRUN_CLOUD=azure and the VM's own name. Azure does not return custom data from its API once the VM
exists.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from spotrun.providers.startup import AGENT_LOG, CLOUD_ENV_VAR, INSTANCE_DISK, encoded_within_limit, render_bootstrap

# Azure's limit on osProfile.customData, before base64.
MAX_CUSTOM_DATA_BYTES = 64 * 1024 - 1
# Read by spotrun.agent.cloud_notices: which notice source to watch, and which VM's Scheduled Events are ours.
CLOUD_ENV = CLOUD_ENV_VAR
VM_NAME_ENV = "SPOTRUN_AZURE_VM_NAME"
CLOUD = "azure"


def render_startup_script(
    user_data: Mapping[str, Any],
    install_command: str,
    python: str,
    vm_name: str,
    instance_disk: str = INSTANCE_DISK,
    agent_log: str = AGENT_LOG,
) -> str:
    """A bash script that installs spotrun with `install_command` and execs the boot command on VM `vm_name`."""
    return render_bootstrap(
        user_data,
        install_command=install_command,
        python=python,
        instance_disk=instance_disk,
        agent_log=agent_log,
        comment="spotrun VM bootstrap, rendered by spotrun.providers.azure",
        env_over_boot={CLOUD_ENV: CLOUD, VM_NAME_ENV: vm_name},
    )


def custom_data(script: str) -> str:
    """`script` as osProfile.customData (base64), refused when Azure would refuse it."""
    raw = encoded_within_limit(script, MAX_CUSTOM_DATA_BYTES, "Azure custom data")
    return base64.b64encode(raw).decode("ascii")
