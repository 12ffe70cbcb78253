"""A launch whose allocation failed, its VM deleted by the provider, and the controller dying before it recorded the
refusal: the restarted controller must end the attempt as that refusal (no bill, no preemption), not read the VM
it finds being deleted, or gone, as an evicted spot VM."""

from __future__ import annotations

import pytest

from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Job

SPEC = """
name: refused
run: "true"
resources: {cloud: azure, instance_type: Standard_NC6s_v3, prices: {on_demand: 3.06, spot: 0.9}}
spot: {zones: [eastus-2]}
"""
NO_CAPACITY = ("ZonalAllocationFailed", "Allocation failed. We do not have sufficient capacity in this zone.")


class Crash(BaseException):
    """The controller process dying at this point (not an Exception: nothing catches it)."""


def prices(cloud, instance_type, market, zone, accelerators=None):
    return (0.9 if market == "spot" else 3.06), 3.06


def controller(store, provider, clock) -> Controller:
    settings = ControllerSettings(controller_url="http://unused", boot_timeout=600, heartbeat_timeout=600)
    return Controller(store, settings, clock=clock, provider_factory=lambda name: provider, prices=prices)


def dies_after_discarding_the_failed_vm(provider) -> None:
    discard = provider._discard_failed

    def discard_then_die(name: str) -> None:
        discard(name)
        raise Crash()

    provider._discard_failed = discard_then_die


def first_attempt(store, job_id: int) -> Attempt:
    with store.session() as session:
        return session.query(Attempt).filter_by(job_id=job_id).order_by(Attempt.id).first()


@pytest.mark.parametrize("deletion_done", [False, True], ids=["vm-still-deleting", "vm-gone"])
def test_a_refusal_the_controller_died_before_recording_is_recorded_as_a_refusal(store, arm, make_provider,
                                                                                deletion_done):
    clock = ManualClock()
    first = make_provider()
    dies_after_discarding_the_failed_vm(first)
    job_id = jobs.submit(store, parse_spec(SPEC), clock.now())
    arm.fail_next_allocation(*NO_CAPACITY)
    with pytest.raises(Crash):
        controller(store, first, clock).tick()
    assert first_attempt(store, job_id).end_reason is None, "the refusal was not recorded"
    if deletion_done:
        arm.settle_all()
    arm.fail_next_allocation(*NO_CAPACITY)  # the zone has no capacity still

    restarted = controller(store, make_provider(), clock)
    for _ in range(2):
        clock.advance(5)
        restarted.tick()
        arm.settle_all()  # Azure finishes deleting the failed VM

    attempt = first_attempt(store, job_id)
    assert (attempt.end_reason, attempt.instance_id, attempt.billed_seconds) == ("no_capacity", None, 0.0)
    with store.session() as session:
        assert session.get(Job, job_id).preemptions == 0


def test_a_launch_given_up_after_launch_timeout_does_not_take_its_vm_being_deleted(store, arm, make_provider):
    """Past launch_timeout the controller looks the launch up by its client token (its answers may have been lost):
    the refused VM it finds still being deleted is not the launch's instance, or the attempt ran on it and its going
    read as an eviction, billed."""
    clock = ManualClock()
    first = make_provider()
    dies_after_discarding_the_failed_vm(first)
    job_id = jobs.submit(store, parse_spec(SPEC), clock.now())
    arm.fail_next_allocation(*NO_CAPACITY)
    arm.deleting_reads = 10  # Azure is slow to delete it
    with pytest.raises(Crash):
        controller(store, first, clock).tick()

    restarted = controller(store, make_provider(), clock)
    clock.advance(restarted.settings.launch_timeout + 5)  # the controller came back late
    for _ in range(2):
        restarted.tick()
        arm.settle_all()  # Azure finishes deleting the failed VM
        clock.advance(5)

    attempt = first_attempt(store, job_id)
    assert (attempt.end_reason, attempt.instance_id, attempt.billed_seconds) == ("launch_error", None, 0.0)
    with store.session() as session:
        assert session.get(Job, job_id).preemptions == 0
