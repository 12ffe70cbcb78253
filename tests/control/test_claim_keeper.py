"""The worker's claims are renewed on a thread while a tick runs, between drives by the controller's clock, and no
longer once a drive is stuck."""

from __future__ import annotations

import time

from spotrun.control.claim_keeper import ClaimKeeper
from spotrun.control.clock import ManualClock


class Renewals:
    def __init__(self, fail_first: int = 0) -> None:
        self.count, self.fail_first = 0, fail_first

    def __call__(self) -> None:
        self.count += 1
        if self.count <= self.fail_first:
            raise RuntimeError("database is locked")


def test_a_long_drive_is_renewed_on_the_thread_until_it_counts_as_stuck():
    renewals = Renewals(fail_first=1)  # a failed renewal is logged and the next one tries again
    with ClaimKeeper(renewals, time.monotonic, every=0.05, give_up_after=0.3) as keeper:
        keeper.drive_started()
        time.sleep(0.25)
        assert renewals.count >= 2, "renewed while the drive ran"
        time.sleep(0.4)
        stuck = renewals.count
        time.sleep(0.4)
        assert renewals.count == stuck, "renewed after the drive counted as stuck"
        keeper.drive_started()  # the next drive: renewed again
        time.sleep(0.25)
        assert renewals.count > stuck


def test_between_drives_it_renews_when_the_controllers_clock_has_moved_a_third_of_a_life():
    clock, renewals = ManualClock(), Renewals()
    with ClaimKeeper(renewals, clock.now, every=10.0, give_up_after=300.0) as keeper:
        keeper.drive_started()
        clock.advance(9.0)
        keeper.drive_started()
        assert renewals.count == 0
        clock.advance(2.0)
        keeper.drive_started()
        assert renewals.count == 1
        keeper.drive_started()
        assert renewals.count == 1


def test_a_controller_that_is_not_a_worker_keeps_nothing():
    with ClaimKeeper(None, time.monotonic, every=0.01, give_up_after=1.0) as keeper:
        keeper.drive_started()
        time.sleep(0.05)
    assert keeper._thread is None
