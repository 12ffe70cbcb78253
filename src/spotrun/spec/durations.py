"""Durations in job files: a number of seconds, or text like "90s", "10m", "1h30m", "1.5h", "500ms"."""

from __future__ import annotations

import math
import re

from spotrun.spec.values import describe

_NUMBER = r"\d+(?:\.\d+)?"
# Units in descending order, each at most once: "1d2h3m4s500ms". The lookahead keeps "500ms" from reading as minutes.
_DURATION = re.compile(
    rf"(?:(?P<d>{_NUMBER})d)?"
    rf"(?:(?P<h>{_NUMBER})h)?"
    rf"(?:(?P<m>{_NUMBER})m(?!s))?"
    rf"(?:(?P<s>{_NUMBER})s)?"
    rf"(?:(?P<ms>{_NUMBER})ms)?",
    re.IGNORECASE,
)
_SECONDS_PER_UNIT = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_EXPECTED = "must be a duration like 90s, 10m, 2h, 1h30m or a number of seconds"
# Longer than any job runs, waits or keeps logs. Past it, durations broke what uses them: a restart_overhead of 1e20
# days had the deadline planner loop over as many restart ages (the controller's tick never returned), a
# sync_interval past threading's wait limit ended the agent's backup thread, a log age past 1970 failed to print.
MAX_DURATION_SECONDS = 3650 * 86400.0


class DurationTooLong(ValueError):
    """A duration past MAX_DURATION_SECONDS."""


def parse_duration(value: object, *, longest: float = MAX_DURATION_SECONDS) -> float:
    """Seconds in `value` (a number of seconds, or text like "90", "90s", "10m", "1h30m", "1.5h", "1d", "500ms").

    Raises ValueError naming the bad value when it is negative, not finite, or not a duration; DurationTooLong when
    it is longer than `longest` (a spec stored before the cap is read back without it: `spec.fields.STORED`).
    """
    if isinstance(value, bool):  # bool is an int subclass; `true` is never a duration
        raise ValueError(f"{_EXPECTED}; got {describe(value)}")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an integer past a float's range
            raise ValueError(f"must be a finite duration; got {describe(value)}") from None
        return _checked_seconds(seconds, value, longest)
    if isinstance(value, str):
        return _checked_seconds(_parse_text(value), value, longest)
    raise ValueError(f"{_EXPECTED}; got {describe(value)}")


def _parse_text(text: str) -> float:
    compact = re.sub(r"\s+", "", text)
    if compact.startswith("-"):
        raise ValueError(f"must not be negative; got {describe(text)}")
    if re.fullmatch(_NUMBER, compact):
        return float(compact)
    match = _DURATION.fullmatch(compact)
    if not compact or match is None or not any(match.groupdict().values()):
        raise ValueError(f"{_EXPECTED}; got {describe(text)}")
    return sum(float(amount) * _SECONDS_PER_UNIT[unit] for unit, amount in match.groupdict().items() if amount)


def _checked_seconds(seconds: float, original: object, longest: float) -> float:
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"must be a finite duration; got {describe(original)}")
    if seconds < 0:
        raise ValueError(f"must not be negative; got {describe(original)}")
    if seconds > longest:
        raise DurationTooLong(f"must be at most 3650d (10 years); got {describe(original)}")
    return seconds
