"""How the CLI writes a moment: the local wall-clock time."""

from __future__ import annotations

from datetime import datetime


def clock_time(at: float | None) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S") if at else "—"
