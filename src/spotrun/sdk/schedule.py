"""When saves happen: the schedule settings the Checkpointer and the framework callbacks share."""

from __future__ import annotations

DEFAULT_EVERY_SECONDS = 300.0


def check_schedule(*, every_seconds: float | None, keep_last: int | None, every_steps: int | None = None) -> None:
    """ValueError naming a save schedule that cannot be kept."""
    if every_steps is not None and every_steps < 1:
        raise ValueError(f"every_steps must be at least 1 (or None), got {every_steps}")
    if every_seconds is not None and every_seconds <= 0:
        raise ValueError(f"every_seconds must be positive (or None), got {every_seconds}")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be at least 1 (or None to keep all), got {keep_last}")
