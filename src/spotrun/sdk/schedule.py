"""When saves happen: the schedule settings the Checkpointer and the framework callbacks share."""

from __future__ import annotations

import math
from numbers import Integral, Real

DEFAULT_EVERY_SECONDS = 300.0


def check_schedule(*, every_seconds: float | None, keep_last: int | None, every_steps: int | None = None) -> None:
    """ValueError (TypeError for a value of the wrong type, such as an environment variable's text passed on as it
    is) naming a save schedule that cannot be kept."""
    _check_count("every_steps", every_steps, "(or None)")
    if every_seconds is not None:
        if isinstance(every_seconds, bool) or not isinstance(every_seconds, Real):
            raise TypeError(f"every_seconds must be a number of seconds (or None), got {every_seconds!r}")
        if math.isnan(every_seconds) or every_seconds <= 0:
            raise ValueError(f"every_seconds must be positive (or None), got {every_seconds}")
    _check_count("keep_last", keep_last, "(or None to keep all)")


def _check_count(name: str, value: int | None, or_none: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be a whole number {or_none}, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1 {or_none}, got {value}")
