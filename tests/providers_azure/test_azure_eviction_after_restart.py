"""A spot VM evicted (policy Delete) while the controller was down, or as it restarted, is a preemption: the
eviction was remembered only in the provider's memory, so a restarted controller read the vanished VM as lost."""

from __future__ import annotations

import pytest

from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.spec import parse_spec
from spotrun.state import Attempt

SPEC = """
name: evicted
run: "true"
resources: {cloud: azure, instance_type: Standard_NC6s_v3, prices: {on_demand: 3.06, spot: 0.9}}
spot: {zones: [eastus-2], use_spot: %s}
"""


def prices(cloud, instance_type, market, zone, accelerators=None):
    return (0.9 if market == "spot" else 3.06), 3.06


@pytest.fixture
def start_controller(store, make_provider):
    clock = ManualClock()

    def start() -> Controller:
        """A controller process: its own provider, which has seen nothing yet."""
        provider = make_provider()
        settings = ControllerSettings(controller_url="http://unused", boot_timeout=600, heartbeat_timeout=600)
        return Controller(store, settings, clock=clock, provider_factory=lambda name: provider, prices=prices)

    return start


def _placed(store, job_id: int) -> Attempt:
    with store.session() as session:
        return session.query(Attempt).filter_by(job_id=job_id).order_by(Attempt.id).first()


@pytest.mark.parametrize("seen_before_restart", [True, False])
def test_a_spot_vm_evicted_across_a_controller_restart_is_preempted(store, arm, start_controller, seen_before_restart):
    first = start_controller()
    job_id = jobs.submit(store, parse_spec(SPEC % "true"), first.clock.now())
    first.tick()  # launched
    if seen_before_restart:
        first.tick()  # watched: running
    vm = _placed(store, job_id).instance_id
    assert vm is not None and _placed(store, job_id).market == "spot"

    arm.evict(vm)  # while no controller runs: the VM is deleted
    first.clock.advance(5)
    start_controller().tick()

    assert _placed(store, job_id).end_reason == "preempted"


def _launched_by_a_first_controller(store, start_controller, spot: bool) -> tuple[Controller, int, str]:
    first = start_controller()
    job_id = jobs.submit(store, parse_spec(SPEC % ("true" if spot else "false")), first.clock.now())
    first.tick()
    return first, job_id, _placed(store, job_id).instance_id


def test_a_spot_vm_azure_deletes_for_its_eviction_as_the_controller_restarts_is_preempted(store, arm, start_controller):
    first, job_id, vm = _launched_by_a_first_controller(store, start_controller, spot=True)
    with arm._lock:  # the eviction's deletion under way
        arm.vms[vm.lower()].resource["properties"]["provisioningState"] = "Deleting"
        arm.vms[vm.lower()].deleting_reads_left = 3

    first.clock.advance(5)
    start_controller().tick()

    assert _placed(store, job_id).end_reason == "preempted"


def test_an_on_demand_vm_deleted_across_a_restart_is_lost_not_preempted(store, arm, start_controller):
    first, job_id, vm = _launched_by_a_first_controller(store, start_controller, spot=False)
    assert _placed(store, job_id).market == "on-demand"

    arm.delete_outside(vm)
    first.clock.advance(5)
    start_controller().tick()

    assert _placed(store, job_id).end_reason == "lost"


def test_a_spot_vm_evicted_hours_before_a_restart_is_billed_to_its_heartbeat_timeout(store, arm, start_controller):
    """Azure states no end for a VM it deleted: it was billed to when the controller came back, hours later."""
    first, job_id, vm = _launched_by_a_first_controller(store, start_controller, spot=True)
    started_at = _placed(store, job_id).started_at  # Azure's timeCreated, on the fake's wall clock
    first.clock.advance(started_at - first.clock.now())
    with store.session() as session:  # its agent reported in, and was last heard of 20 minutes in
        attempt = session.get(Attempt, _placed(store, job_id).id)
        attempt.agent_started_at = started_at + 60
        attempt.last_heartbeat_at = started_at + 1200
    first.clock.advance(1200)
    arm.evict(vm)  # while no controller runs
    first.clock.advance(3 * 3600)
    start_controller().tick()

    attempt = _placed(store, job_id)
    assert attempt.end_reason == "preempted"
    assert attempt.ended_at == started_at + 1200 + 600  # the heartbeat timeout: it may have run on unheard that long
    assert attempt.billed_seconds == pytest.approx(1800, abs=1e-6)
