"""How the CLI reads a moment given on its command line (`spotrun audit --since`): a time ago, a date or time (UTC
unless it names its offset), or unix seconds written `@SECONDS`. A bare number is refused: "3600" read as seconds
since 1970 or as an hour ago would each surprise someone, and "20260301" was no date either."""

from __future__ import annotations

import re
from datetime import datetime, timezone

FORMS = ("a time ago (30m, 12h, 7d), a date or time in UTC (2026-03-01, 2026-03-01T14:00, or with its offset: "
         "2026-03-01T14:00+02:00), or unix seconds written @SECONDS (as --json writes times)")
_UNIX = re.compile(r"@(\d{1,12}(?:\.\d+)?)")
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class NotAMoment(ValueError):
    """What was written is no moment; the message says what is taken."""


def moment(written: str, now: float) -> float:
    """Unix seconds of the moment `written` (see the module's doc); a moment before 1970 is 0."""
    text = written.strip()
    if (unix := _UNIX.fullmatch(text)) is not None:
        return float(unix.group(1))
    if _BARE_NUMBER.fullmatch(text):
        raise NotAMoment(f"{written!r} is ambiguous: write {text}s for that long ago, @{text} for unix seconds, or a "
                         "date as 2026-03-01")
    try:
        given = datetime.fromisoformat(text)
    except ValueError:
        return max(0.0, now - _ago(written, text))
    if given.tzinfo is None:  # as the CLI shows a team server's times
        given = given.replace(tzinfo=timezone.utc)
    try:
        return max(0.0, given.timestamp())
    except OverflowError:  # 0001-01-01 with an offset east of UTC: a moment before year 1
        return 0.0


def _ago(written: str, text: str) -> float:
    from spotrun.spec.durations import DurationTooLong, parse_duration  # the spec package: only for a time ago

    try:
        return parse_duration(text)
    except DurationTooLong as problem:
        raise NotAMoment(str(problem)) from None
    except ValueError:
        raise NotAMoment(f"must be {FORMS}; got {written!r}") from None
