"""When an attempt's instance is billed to (`controller._gone_at`) where the cloud states no end: unit level."""

from __future__ import annotations

import pytest

from spotrun.control.controller import ControllerSettings, _gone_at
from spotrun.providers import InstanceInfo
from spotrun.state import Attempt

SETTINGS = ControllerSettings(controller_url="http://unused", heartbeat_timeout=30.0, boot_timeout=120.0)
NOW = 10_000.0


def gone(terminated_at: float | None = None) -> InstanceInfo:
    return InstanceInfo(instance_id="vm-1", zone="z", market="spot", instance_type="t", state="terminated",
                        reclaimed=True, terminated_at=terminated_at)


def attempt(last_heartbeat_at: float | None = None, end_reason: str = "preempted") -> Attempt:
    return Attempt(started_at=1_000.0, agent_started_at=last_heartbeat_at, last_heartbeat_at=last_heartbeat_at,
                   end_reason=end_reason)


@pytest.mark.parametrize(("heard_at", "billed_to"), [
    (2_000.0, 2_030.0),  # the heartbeat timeout after its last heartbeat
    (None, 1_120.0),  # its agent never reported: the boot timeout after its start
    (NOW - 10, NOW),  # never past now
])
def test_an_instance_the_cloud_ended_without_saying_when_is_billed_to_when_it_would_have_been_lost(heard_at, billed_to):
    assert _gone_at(attempt(heard_at), gone(), NOW, SETTINGS, gone_before=True) == billed_to


def test_an_end_the_cloud_states_is_kept():
    assert _gone_at(attempt(2_000.0), gone(terminated_at=5_000.0), NOW, SETTINGS, gone_before=True) == 5_000.0


def test_an_instance_spotrun_terminated_itself_is_billed_to_now():
    """Up until spotrun's own terminate (its agent silent, e.g.): the cloud's silence on the end says nothing."""
    assert _gone_at(attempt(2_000.0, "lost"), gone(), NOW, SETTINGS, gone_before=False) == NOW


@pytest.mark.parametrize(("backup_at", "billed_to"), [
    (5_000.0, 5_000.0),  # its agent backed up, unheard, after it was due as lost: it ran until then
    (2_010.0, 2_030.0),  # a backup before it was due as lost moves nothing earlier
    (NOW + 60, 2_030.0),  # dated after now by the store's clock: not trusted
    (None, 2_030.0),  # none found, or the store could not be read
])
def test_an_instance_gone_without_a_stated_end_is_billed_at_least_to_its_newest_backup(backup_at, billed_to):
    assert _gone_at(attempt(2_000.0), gone(), NOW, SETTINGS, gone_before=True, backup_at=backup_at) == billed_to


def test_a_backup_never_moves_an_end_the_cloud_states_nor_one_spotrun_made():
    assert _gone_at(attempt(2_000.0), gone(terminated_at=3_000.0), NOW, SETTINGS, gone_before=True,
                    backup_at=5_000.0) == 3_000.0
    assert _gone_at(attempt(2_000.0, "lost"), gone(), NOW, SETTINGS, gone_before=False, backup_at=5_000.0) == NOW
