"""The controller against the real local cloud, killed while the cloud creates the instance it launches."""

from __future__ import annotations

import pytest

from memory_cloud import Crash
from spotrun.providers.local import LocalProvider, ManualMarket, records

LOCAL = """
name: unit
run: "true"
resources: {cloud: local, instance_type: local.cpu}
"""


def test_controller_killed_inside_a_local_launch_leaves_every_instance_an_attempts(world, tmp_path, monkeypatch):
    cloud = world.cloud = LocalProvider(tmp_path / "cloud", market=ManualMarket(notice_seconds=0.5))
    job_id = world.submit(LOCAL)
    write = records.InstanceDir.write

    def dies_before_the_record(self, record):  # the controller's process is killed after the folder is made
        raise Crash()

    monkeypatch.setattr(records.InstanceDir, "write", dies_before_the_record)
    with pytest.raises(Crash):
        world.tick()
    monkeypatch.setattr(records.InstanceDir, "write", write)
    try:
        world.controller = world.new_controller()  # a new process
        world.tick()
        placed = {a.instance_id for a in world.attempts(job_id) if a.instance_id}
        launched = {i.instance_id for i in cloud.list_instances()}
        assert len(placed) == 1
        assert launched == placed, "an instance was launched that no attempt recorded (or the reverse)"
    finally:
        for info in cloud.list_instances():
            if info.state != "terminated":
                cloud.terminate(info.instance_id)
