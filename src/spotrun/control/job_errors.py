"""The errors of the requests on a job, and the check of a preemption's notice: apart from `spotrun.control.jobs`,
which needs the store, so that the CLI's remote mode raises and catches the same errors without loading it."""

from __future__ import annotations

import math


class JobNotFound(LookupError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"no job with id {job_id}")


class PreemptRefused(LookupError):
    """A preemption that cannot be done: nothing running to preempt, an on-demand instance, a notice out of range,
    or a cloud that cannot take an instance back on request."""


MAX_NOTICE_SECONDS = 3600.0


def check_notice(notice_seconds: float | None, name: str = "the notice") -> None:
    """PreemptRefused for a notice that is not a number of seconds from 0 to MAX_NOTICE_SECONDS; the message calls
    it `name` (the CLI: its option)."""
    if notice_seconds is None:
        return
    if not (math.isfinite(notice_seconds) and 0 <= notice_seconds <= MAX_NOTICE_SECONDS):
        raise PreemptRefused(
            f"{name} must be between 0 and {MAX_NOTICE_SECONDS:g} seconds, got {notice_seconds}"
        )
