"""The heartbeats an agent API received, kept in memory for the controller of its process (`control.heard`)."""

from __future__ import annotations

import math

from spotrun.control.clock import ManualClock
from spotrun.control.heard import KEPT_SECONDS, HeardAgents


def test_the_last_heartbeat_of_each_attempt_is_kept_and_an_unheard_one_is_minus_infinity():
    clock = ManualClock()
    heard = HeardAgents(clock.now)
    heard.heard(7)
    clock.advance(5)
    heard.heard(7)
    heard.heard(8)
    assert heard.last(7) == heard.last(8) == clock.now()
    assert heard.last(9) == -math.inf


def test_attempts_not_heard_for_longer_than_kept_are_forgotten():
    clock = ManualClock()
    heard = HeardAgents(clock.now)
    heard.heard(1)
    heard.heard(2)
    clock.advance(KEPT_SECONDS / 2)
    heard.heard(2)
    clock.advance(KEPT_SECONDS / 2 + 1)
    heard.heard(3)  # each heartbeat drops those heard too long ago
    assert heard.last(1) == -math.inf
    assert heard.last(2) == clock.now() - KEPT_SECONDS / 2 - 1
    assert len(heard._heard) == 2
