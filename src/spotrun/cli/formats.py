"""How the CLI writes a moment, a duration and a size."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone

MAX_FILE_BYTES = 2**63 - 1  # the largest file a filesystem holds (its sizes are signed 64-bit)


def clock_time(at: float | None, now: float | None = None) -> str:
    """A moment as the CLI writes it: the local wall-clock time, with its date unless it is of the day of `now`
    (default: the clock's), so that what is read a day later still says which day it was."""
    if not at:
        return "—"
    moment = datetime.fromtimestamp(at)
    today = datetime.fromtimestamp(time.time() if now is None else now).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M:%S")


def utc_time(at: float) -> str:
    """A moment of a team server's records (users, tokens, the audit log) in UTC, with its date: their reader may be
    in another zone than whoever made them (as `spotrun logs` writes an attempt's start)."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def byte_size(count: int) -> str:
    """A size as the CLI writes it: 512 B, 2.0 KiB, 1.5 GiB; one past any file's (a damaged manifest's, which a float
    may not hold) as its power of ten: about 10^400 B."""
    if count > MAX_FILE_BYTES:
        return f"about 10^{math.floor(math.log10(count))} B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return str(count)
