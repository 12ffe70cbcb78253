"""A job's progress as its trainer reports it: the newest checkpoint's steps done, and the run's total steps when the
SDK was told them (`Checkpointer(total_steps=...)`), as the agents' heartbeats stored them on the attempts."""

from __future__ import annotations

from collections.abc import Iterable

from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job


def newest_checkpoint(attempts: Iterable[Attempt]) -> tuple[int, int | None] | None:
    """(steps done, total steps or None) of the newest checkpoint any attempt reported; None before the first."""
    reported = [(a.checkpoint_step, a.total_steps) for a in attempts if a.checkpoint_step is not None]
    return max(reported, key=lambda r: (r[0], r[1] is not None), default=None)


def reported_progress(job: Job, spec: JobSpec) -> float | None:
    """Seconds of compute done: the newest checkpoint's steps over the run's total, times the job's estimated
    duration. None (the policy then counts from the attempts' run time) when that checkpoint named no total or the
    job gave no estimated duration."""
    newest = newest_checkpoint(job.attempts)
    if spec.estimated_duration is None or newest is None or not newest[1]:
        return None
    steps_done, total_steps = newest
    return spec.estimated_duration * min(steps_done / total_steps, 1.0)
