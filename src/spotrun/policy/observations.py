"""What has been seen of spot capacity, per zone: the runs of "available" and "not available" between changes.

The live controller sees spot only through its own tries (a launch that succeeds or answers "no capacity") and
through preemptions; the simulator in its paper model also sees every zone at every tick. Both feed this log,
and policies read lifetimes (how long spot lasted) and gaps (how long it stayed away) from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotrun.policy.placement import PastAttempt

CAPACITY_MISSES = frozenset({"no_capacity", "price_too_low"})


@dataclass
class ZoneRuns:
    """One zone's observations reduced to the completed runs between changes, plus the run going on."""

    available: bool | None = None  # the state of the run going on (None: never observed)
    since: float = 0.0  # when the run going on was first seen
    last_seen: float = float("-inf")  # time of the latest observation
    lifetimes: list[float] = field(default_factory=list)  # completed "available" runs, seconds
    gaps: list[float] = field(default_factory=list)  # completed "not available" runs, seconds
    lost_at: list[float] = field(default_factory=list)  # times spot was seen to go away
    _in_steps: dict[float, tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict, init=False, repr=False, compare=False,
    )

    def completed_in_steps(self, step: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(lifetimes, gaps) in whole steps of `step` seconds. Policies ask every step and the runs only grow, so
        each run is rounded once: with weeks of history, rounding them all again was a third of a sweep's profile."""
        lives, gaps = self._in_steps.get(step, ((), ()))
        if len(lives) < len(self.lifetimes) or len(gaps) < len(self.gaps):
            lives += _rounded_to_steps(self.lifetimes[len(lives):], step)
            gaps += _rounded_to_steps(self.gaps[len(gaps):], step)
            self._in_steps[step] = lives, gaps
        return lives, gaps

    def observe(self, at: float, available: bool) -> None:
        if available != self.available:
            if self.available is not None:
                (self.lifetimes if self.available else self.gaps).append(at - self.since)
                if self.available:
                    self.lost_at.append(at)
            self.available, self.since = available, at
        self.last_seen = at


def _rounded_to_steps(seconds: list[float], step: float) -> tuple[int, ...]:
    return tuple(round(s / step) for s in seconds)


class SpotLog:
    """Append-only observations of spot capacity for any number of zones (observations must come in time order)."""

    def __init__(self) -> None:
        self._zones: dict[str, ZoneRuns] = {}

    def record(self, zone: str, at: float, available: bool) -> None:
        runs = self._zones.get(zone)
        if runs is None:
            runs = self._zones[zone] = ZoneRuns()
        runs.observe(at, available)

    def zone(self, zone: str) -> ZoneRuns:
        return self._zones.get(zone) or ZoneRuns()

    def seen_at(self, zone: str, at: float) -> bool | None:
        """The state observed at exactly `at` (or later), else None."""
        runs = self._zones.get(zone)
        if runs is None or runs.last_seen < at:
            return None
        return runs.available

    @classmethod
    def from_history(cls, history: Iterable[PastAttempt], now: float | None = None) -> SpotLog:
        """What the controller's attempt records tell about spot: starts, reclaims and "no capacity" answers, and,
        given `now`, that spot is there now where a spot instance still runs."""
        events: list[tuple[float, str, bool]] = []
        for attempt in history:
            if attempt.market != "spot":
                continue
            if attempt.end_reason in CAPACITY_MISSES:
                events.append((attempt.ended_at or attempt.created_at, attempt.zone, False))
            elif attempt.started_at is not None:
                events.append((attempt.started_at, attempt.zone, True))
                if attempt.ended_at is not None:
                    events.append((attempt.ended_at, attempt.zone, not attempt.taken_back))
                elif now is not None:
                    events.append((max(now, attempt.started_at), attempt.zone, True))
        log = cls()
        for at, zone, available in sorted(events, key=lambda e: e[0]):
            log.record(zone, at, available)
        return log
