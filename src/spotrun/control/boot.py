"""What an instance is told at boot, and what its agent asks the controller for once it runs.

The boot configuration travels as the provider's user data, which the cloud keeps for the instance's whole life
and shows to anyone allowed to describe the instance. So it holds only what the agent needs to reach the
controller (the attempt's token among it); the job's own part (run, setup, workdir, env: where its secrets go)
is handed to the agent over the agent API, and only until the agent reports that it started
(`spotrun.server.agent_api`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job


def agent_config(
    job: Job, attempt: Attempt, token: str, controller_url: str, heartbeat_interval: float, *,
    alternates: Sequence[str] = (),
) -> dict[str, Any]:
    """The agent's boot configuration: everything but the job's part, which the agent fetches (`job_part`).
    `alternates`: other workers' agents' APIs, where the agent reports should the controller at `controller_url` be
    gone (`state.workers`)."""
    spec = JobSpec.stored(job.spec)
    config = {
        "controller_url": controller_url,
        "token": token,
        "job_id": job.id,
        "attempt_id": attempt.id,
        "attempt_number": attempt.number,
        "checkpoint_dir": spec.checkpoint.dir,
        "checkpoint_store": spec.checkpoint.store,
        "sync_interval": spec.checkpoint.sync_interval,
        "notice_grace": spec.spot.notice_grace,
        "heartbeat_interval": heartbeat_interval,
        "gang": _gang_config(spec, attempt),
        "hold": attempt.standby_for is not None,
    }
    if others := [url for url in alternates if url != controller_url]:  # left out when none: an older agent still boots
        config["controller_urls"] = others
    if spec.checkpoint.final_backup_timeout is not None:  # left out, the agent's default: an older agent still boots
        config["final_backup_timeout"] = spec.checkpoint.final_backup_timeout
    return config


def job_part(spec: JobSpec) -> dict[str, Any]:
    """What the agent fetches before it starts: the job's commands and environment."""
    return {"run": spec.run, "setup": spec.setup, "workdir": spec.workdir, "env": dict(spec.env)}


def _gang_config(spec: JobSpec, attempt: Attempt) -> dict[str, Any] | None:
    if spec.resources.nodes == 1:
        return None
    return {
        "nnodes": spec.resources.nodes,
        "node_rank": attempt.node_rank,
        "launcher": spec.distributed.launcher,
        "procs_per_node": spec.distributed.procs_per_node,
    }


def user_data(config: dict[str, Any]) -> dict[str, Any]:
    """Boot command for providers that start processes directly (local); clouds render it into a startup script."""
    # `python` in the job's command means the interpreter spotrun itself runs under (the image's Python).
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {
        "argv": [sys.executable, "-m", "spotrun.agent"],
        "env": {"SPOTRUN_AGENT_CONFIG": json.dumps(config), "PATH": path},
    }
