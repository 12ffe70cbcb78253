"""The controller against the real local cloud, on instances whose boot command (the agent's start) fails."""

from __future__ import annotations

import sys
import time

from spotrun.control import controller as controller_module
from spotrun.providers.local import LocalProvider, ManualMarket
from spotrun.state import Event

LOCAL = """
name: unit
run: "true"
resources: {cloud: local, instance_type: local.cpu}
max_restarts_on_error: 1
"""
NO_SPOTRUN = "import sys\nsys.exit('/usr/bin/python3: No module named spotrun.agent')"


def test_a_job_whose_instances_cannot_start_the_agent_fails_after_its_restarts(world, tmp_path, monkeypatch):
    """Only Kubernetes said why an instance never started the agent: on the local cloud (and AWS, GCP, Azure) such an
    attempt was lost at its boot timeout and relaunched, never counted: a job that cannot start ran up launches for
    ever."""
    cloud = world.cloud = LocalProvider(tmp_path / "cloud", market=ManualMarket(), shutdown_grace_seconds=0.2)
    monkeypatch.setattr(controller_module, "user_data", lambda config: {"argv": [sys.executable, "-c", NO_SPOTRUN]})
    world.clock.advance(time.time() - world.clock.now())  # the local cloud's times are the wall clock's
    world.controller = world.new_controller()
    job_id = world.submit(LOCAL)
    try:
        for _ in range(2):  # the first run and its one restart
            world.tick()
            instance = world.attempts(job_id)[-1].instance_id
            _wait_for(lambda: cloud.describe(instance).detail.get("boot_exit_code") is not None)
            world.tick(90)  # past the boot timeout (60 s)
        job = world.job(job_id)
        assert [a.end_reason for a in job.attempts] == ["failed", "failed"]
        assert job.state == "FAILED" and job.restarts_on_error == 2
        assert job.failure_reason.startswith("the agent could not be started 2 times")
        assert job.failure_reason.endswith("the boot command exited 1: /usr/bin/python3: No module named spotrun.agent")
        with world.store.session() as session:
            endings = [e.message for e in session.query(Event).filter_by(job_id=job_id, kind="attempt_ending")]
        assert all("the boot command exited 1: /usr/bin/python3: No module named spotrun.agent" in m for m in endings)
    finally:
        for info in cloud.list_instances():
            if info.state != "terminated":
                cloud.terminate(info.instance_id)


def _wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
