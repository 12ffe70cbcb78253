"""A job's progress as its trainer reports it: the newest checkpoint's steps done, and the run's total steps when the
SDK was told them (`Checkpointer(total_steps=...)`), as the agents' heartbeats stored them on the attempts; and from
when those reports came, the trainer's step rate, which gives a job that named no estimated duration one."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from spotrun.spec import JobSpec
from spotrun.state import Attempt, Job

# Below this much measured training time the step rate is too rough to plan with (a checkpoint interval or two).
MIN_RATE_SECONDS = 300.0


def record_checkpoint(
    attempt: Attempt, steps_done: int, total_steps: int | None, now: float, restored: int | None = None
) -> None:
    """Store a heartbeat's newest checkpoint on its attempt, noting when the attempt's first one and each new one
    were first reported (the step rate's clock). `restored`: the newest step the job's ended attempts reported. The
    agent reports the checkpoint it restored from the moment it starts, before the trainer has restored it and
    trained on: that one is not the attempt's first, or its boot and restore would count as training time (a step
    rate too low) and as no restart overhead at all."""
    if attempt.first_checkpoint_step is None and (restored is None or steps_done > restored):
        attempt.first_checkpoint_step, attempt.first_checkpoint_at = steps_done, now
    if steps_done != attempt.checkpoint_step or attempt.checkpoint_at is None:
        attempt.checkpoint_at = now
    attempt.checkpoint_step, attempt.total_steps = steps_done, total_steps


def restored_step(session: Session, attempt: Attempt) -> int | None:
    """The newest checkpoint step the job's ended attempts reported: what `attempt` may have restored."""
    return session.scalar(
        select(func.max(Attempt.checkpoint_step)).where(
            Attempt.job_id == attempt.job_id, Attempt.id != attempt.id, Attempt.ended_at.is_not(None)
        )
    )


def newest_checkpoint(attempts: Iterable[Attempt]) -> tuple[int, int | None] | None:
    """(steps done, total steps or None) of the newest checkpoint any attempt reported; None before the first."""
    reported = [(a.checkpoint_step, a.total_steps) for a in attempts if a.checkpoint_step is not None]
    return max(reported, key=lambda r: (r[0], r[1] is not None), default=None)


def step_rate(attempts: Iterable[Attempt]) -> float | None:
    """Steps per second of training: the steps each attempt's checkpoints advanced from its first report to its
    newest, over the time between those reports, summed over attempts (time between attempts, boots and restores
    before an attempt's first report do not count: the policy counts restarts itself). None until there is at
    least MIN_RATE_SECONDS of such time."""
    steps, seconds = 0, 0.0
    for attempt in attempts:
        if attempt.first_checkpoint_step is None or attempt.first_checkpoint_at is None or attempt.checkpoint_at is None:
            continue
        gained = (attempt.checkpoint_step or 0) - attempt.first_checkpoint_step
        if gained > 0:
            steps += gained
            seconds += attempt.checkpoint_at - attempt.first_checkpoint_at
    if steps <= 0 or seconds < MIN_RATE_SECONDS:
        return None
    return steps / seconds


def restart_overhead(attempts: Iterable[Attempt]) -> float | None:
    """Seconds from an attempt's launch until its trainer was training again (boot, setup, restore), the longest
    over the job's attempts: when an attempt first reported a checkpoint, less the steps it had made by then past
    where it started (the newest checkpoint reported before it) at the measured step rate. None until the rate is
    known and an attempt has reported.

    The longest, not a typical one: a deadline plan counts on a restart costing no more than this, and the estimate
    itself runs short when a predecessor's last checkpoint was written but never reported (by the steps it saved)."""
    rate = step_rate(attempts)
    if rate is None:
        return None
    samples, restored = [], 0
    for attempt in sorted(attempts, key=lambda a: a.number):
        if attempt.first_checkpoint_at is not None and attempt.first_checkpoint_step is not None:
            resumed_at = attempt.first_checkpoint_at - max(attempt.first_checkpoint_step - restored, 0) / rate
            samples.append(max(resumed_at - attempt.created_at, 0.0))
        restored = max(restored, attempt.checkpoint_step or 0)
    return max(samples, default=None)


def compute_and_progress(job: Job, spec: JobSpec) -> tuple[float | None, float | None]:
    """(seconds of compute the whole run needs, seconds of it done), each None when not known.

    The compute is the job's `estimated_duration`, else its total steps over the step rate measured so far. What is
    done is the newest checkpoint's steps over the run's total, times that compute; when that checkpoint named no
    total, its steps over the step rate, once that is known (work lost since a checkpoint is not counted either
    way); else the policy counts from the attempts' run time."""
    newest = newest_checkpoint(job.placed_attempts)
    total = newest[1] if newest is not None else None
    compute = spec.estimated_duration
    needs_rate = newest is not None and (compute is None or not total)
    rate = step_rate(job.placed_attempts) if needs_rate else None
    if compute is None and total:
        compute = total / rate if rate is not None else None
    if compute is None or newest is None:
        return compute, None
    if total:
        return compute, compute * min(newest[0] / total, 1.0)
    return compute, newest[0] / rate if rate is not None else None
