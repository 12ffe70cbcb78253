"""Runs of refused launch tries, folded for reading. A job that waits for spot through a long gap is refused again
and again (every few minutes, for hours), and each try is an attempt with its own events: `spotrun status JOB` shows
each run of them as one row of the attempts table, and `--follow` prints the first few tries of a run and then one
line for the rest. The store and the API keep every try."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spotrun.cli.formats import clock_time

if TYPE_CHECKING:
    from spotrun.api_models import AttemptView, EventView

__all__ = ["RefusalStreak", "RefusedTries", "fold_refused_tries"]

SHOWN_IN_FULL = 3  # refused tries of a run whose events `--follow` prints; the rest are counted
PLACING_STATES = frozenset({"PROVISIONING", "WAITING"})  # the job being placed, or waiting to be


@dataclass(frozen=True)
class RefusedTries:
    """Launch tries in a row, in the same market, that got no instance and cost nothing (refused, launching failed,
    or a gang's node given back when another was refused): a job that waits for spot through a long gap is refused
    hundreds of times, and each try is an attempt."""

    tries: tuple[AttemptView, ...]

    @property
    def numbers(self) -> str:
        return f"{self.tries[0].number}–{self.tries[-1].number}"

    @property
    def zones(self) -> str:
        return ", ".join(dict.fromkeys(a.zone for a in self.tries))

    @property
    def nodes(self) -> str:
        return ", ".join(str(rank) for rank in dict.fromkeys(a.node_rank for a in self.tries))

    @property
    def ended(self) -> str:
        return f"{clock_time(self.tries[0].ended_at)}–{clock_time(self.tries[-1].ended_at)}"

    @property
    def end(self) -> str:
        return _counted(Counter(a.end_reason for a in self.tries))


def fold_refused_tries(attempts: list[AttemptView]) -> list[AttemptView | RefusedTries]:
    """The attempts, with each run of two or more consecutive refused tries in one market (`RefusedTries`) as one
    item."""
    items: list[AttemptView | RefusedTries] = []
    run: list[AttemptView] = []

    def close_run() -> None:
        items.extend(run if len(run) < 2 else [RefusedTries(tuple(run))])
        run.clear()

    for attempt in attempts:
        if not attempt.no_instance:
            close_run()
            items.append(attempt)
            continue
        if run and run[-1].market != attempt.market:
            close_run()
        run.append(attempt)
    close_run()
    return items


@dataclass
class RefusalStreak:
    """Folds the events of a run of refused launch tries in the follow display: `take` each event as it comes and
    print what it returns. The events of the first `shown_in_full` refused tries of a run are printed as they come;
    the rest of the run is held back and, when something else happens, told in one line (what was held, by market,
    zone and reason), followed by the last held event where it is the job being placed (the try that then got an
    instance, with the policy's reason)."""

    shown_in_full: int = SHOWN_IN_FULL
    shown: set[int] = field(default_factory=set)  # attempts of this run whose events were printed
    held: list[EventView] = field(default_factory=list)
    ends: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # held tries by (market, zone, reason)

    def take(self, event: EventView) -> list[EventView | str]:
        """What to print for `event`, in order: events, and a line (str) where a folded run ends."""
        if not _placing(event):
            return [*self.close(), event]
        if not self._folds(event):
            return [event]
        self.held.append(event)
        if event.no_instance:
            data = event.data or {}
            self.ends[(data.get("market", "?"), data.get("zone", "?"), data["reason"])] += 1
        return []

    def close(self) -> list[EventView | str]:
        """The run is over (something else happened, or the job ended): the line for what was held, if anything."""
        held, ends = self.held, self.ends
        self.shown, self.held, self.ends = set(), [], Counter()
        if not ends:  # nothing but the job waiting: nothing to fold
            return list(held)
        line = (f"{clock_time(held[0].at)}–{clock_time(held[-1].at)} {_more_tries(sum(ends.values()))} got no "
                f"instance ({_where(ends)})")
        last = held[-1]
        return [line, last] if _moved_to(last) == "PROVISIONING" else [line]

    def status(self) -> str | None:
        """For the live line while a run is being folded."""
        tries = sum(self.ends.values())
        return f"{_more_tries(tries)} without an instance since {clock_time(self.held[0].at)}" if tries else None

    def _folds(self, event: EventView) -> bool:
        if event.attempt_id is None:  # a state event: folded once the run has shown its tries
            return len(self.shown) >= self.shown_in_full
        if event.attempt_id in self.shown:
            return False
        if len(self.shown) < self.shown_in_full:
            self.shown.add(event.attempt_id)
            return False
        return True


def _placing(event: EventView) -> bool:
    """An event of a launch try that got no instance, or of the job moving between being placed and waiting."""
    return event.kind == "launch_refused" or event.no_instance or _moved_to(event) in PLACING_STATES


def _moved_to(event: EventView) -> str | None:
    """The state a state event moved the job to (None for other events)."""
    return (event.data or {}).get("to") if event.kind == "state" else None


def _more_tries(count: int) -> str:
    return f"{count} more launch {'try' if count == 1 else 'tries'}"


def _counted(counts: Counter[str]) -> str:
    """E.g. "no_capacity ×2, released ×4"."""
    return ", ".join(f"{what} ×{count}" for what, count in counts.items())


def _where(ends: Counter[tuple[str, str, str]]) -> str:
    """E.g. "spot in m-a, m-b: no_capacity ×12"; markets apart, separated by ";"."""
    parts = []
    for market in dict.fromkeys(m for m, _, _ in ends):
        mine = {(zone, reason): count for (m, zone, reason), count in ends.items() if m == market}
        reasons: Counter[str] = Counter()
        for (_, reason), count in mine.items():
            reasons[reason] += count
        parts.append(f"{market} in {', '.join(dict.fromkeys(z for z, _ in mine))}: {_counted(reasons)}")
    return "; ".join(parts)
