"""The controller daemon outlives a database that stops answering: it serves the agents' API, so its exit left
them without a controller until some command started another."""

from __future__ import annotations

import logging

from sqlalchemy.exc import OperationalError

from spotrun.server.daemon import LEASE_NAME, Daemon
from spotrun.state import Store, lease


class ControllerWithAnOutage:
    """Its first `failures` ticks raise what SQLAlchemy raises for a database that is down or locked."""

    def __init__(self, failures: int) -> None:
        self.failures, self.ticks = failures, 0

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks <= self.failures:
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))


def test_rounds_that_fail_are_retried_and_the_outage_does_not_count_as_idle_time(store: Store, caplog) -> None:
    daemon = Daemon(store, tick_interval=0.01, idle_exit=0.3)
    controller = ControllerWithAnOutage(failures=40)  # about 0.4 s of failures, longer than idle_exit
    caplog.set_level(logging.INFO, logger="spotrun.daemon")
    daemon._loop(controller, "http://127.0.0.1:1")  # type: ignore[arg-type]
    assert controller.ticks > 40  # it went on after the outage, and exited only once idle
    assert "no live jobs" in caplog.text and "lost the controller lease" not in caplog.text
    with store.session() as session:
        assert lease.read(session, LEASE_NAME).holder is None  # given up as it exited
