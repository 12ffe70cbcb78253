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
    rate too low) and as no restart overhead at all, nor as a gap between two saves. The longest gap between two
    new checkpoints it wrote is kept (`save_interval`)."""
    saved_before = attempt.first_checkpoint_at is not None  # its newest checkpoint is one it wrote, not restored
    if attempt.first_checkpoint_step is None and (restored is None or steps_done > restored):
        attempt.first_checkpoint_step, attempt.first_checkpoint_at = steps_done, now
    if steps_done != attempt.checkpoint_step or attempt.checkpoint_at is None:
        if saved_before and steps_done > (attempt.checkpoint_step or 0):
            attempt.longest_save_gap = max(attempt.longest_save_gap or 0.0, now - attempt.checkpoint_at)
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


def compute_and_progress(
    job: Job, spec: JobSpec, overhead: float | None = None
) -> tuple[float | None, float | None]:
    """(seconds of compute the whole run needs, seconds of it done), each None when not known.

    The compute is the job's `estimated_duration`, else its total steps over the step rate measured so far. What is
    done is the newest checkpoint's steps over the run's total, times that compute; when that checkpoint named no
    total, its steps over the step rate, once that is known; else the policy counts from the attempts' run time.
    The steps trained since that checkpoint count too, for a single-node job, once no preemption is likely to take
    them (`unsaved_steps`; `overhead`: the job's restart overhead, when known)."""
    attempts = job.placed_attempts
    newest = newest_checkpoint(attempts)
    if newest is None:
        return spec.estimated_duration, None
    total = newest[1]
    # A gang's ranks restart from the checkpoint whenever one node goes, while its agents beat on: not counted there
    counts_unsaved = spec.resources.nodes == 1 and (saves_before_preemptions(attempts) or trains_on_demand(attempts))
    rate = step_rate(attempts) if spec.estimated_duration is None or not total or counts_unsaved else None
    compute = spec.estimated_duration
    if compute is None and total:
        compute = total / rate if rate is not None else None
    if compute is None:
        return None, None
    steps = newest[0] + (unsaved_steps(attempts, rate, overhead) if counts_unsaved else 0.0)
    if total:
        return compute, compute * min(steps / total, 1.0)
    return compute, steps / rate if rate is not None else None


def saves_before_preemptions(attempts: list[Attempt]) -> bool:
    """Whether the job's trainer has saved before each of its instances was taken back, as far as it has been
    (once at least): every preempted try's agent reported the stop, as it does after the trainer saved at the
    cloud's notice. A try taken without notice, or lost, ended unheard."""
    ended_badly = [a for a in attempts if a.end_reason in ("preempted", "lost")]
    return bool(ended_badly) and all(a.reported_outcome is not None for a in ended_badly)


def trains_on_demand(attempts: list[Attempt]) -> bool:
    """Whether the instance the job trains on is on-demand: the cloud does not take it back, and a move away from it
    asks its trainer to save first, so what it trained since its newest checkpoint is not lost (a lost instance,
    its heartbeats gone, is the rare exception)."""
    reporter = _reporter(attempts)
    return reporter is not None and reporter.market == "on-demand"


def _reporter(attempts: list[Attempt]) -> Attempt | None:
    """The running attempt whose trainer trains the job: the newest checkpoint among those running (a standby holds
    and reports none until it takes over)."""
    running = [a for a in attempts if a.ended_at is None]
    return max(running, key=lambda a: a.checkpoint_step or -1, default=None)


def unsaved_steps(attempts: list[Attempt], rate: float | None, overhead: float | None = None) -> float:
    """Steps the job's trainer trained since its newest checkpoint, at the measured rate: since that checkpoint was
    reported by the instance that runs (before its first: since its launch and a restart `overhead`, when known),
    for as long as its heartbeats say it ran. A trainer that saves seldom otherwise reads as standing still between
    saves, its slack draining, and the policy keeps it off spot."""
    reporter = _reporter(attempts)
    if rate is None or reporter is None:
        return 0.0
    if (gap := _open_save_gap(reporter)) is not None:
        return gap * rate
    if overhead is None:
        return 0.0
    since = reporter.created_at + overhead  # still on what it restored: trained from its restart overhead on
    return max((reporter.last_heartbeat_at or since) - since, 0.0) * rate


def save_interval(attempts: Iterable[Attempt]) -> float | None:
    """The longest time the job's trainer went between two new checkpoints it reported, over its attempts: the most
    work (in seconds of training) a preemption without notice has been seen to cost it. The gap a running attempt
    has open counts too, from its newest checkpoint to its last heartbeat: a trainer that now goes longer without
    saving than it ever did stands to lose that much already, and a plan that waited for the gap to close would
    learn it only after the loss. None until an attempt has reported two (one save says nothing of the next: an
    open gap alone would read as a trainer that loses nothing)."""
    gaps = [attempt.longest_save_gap for attempt in attempts if attempt.longest_save_gap is not None]
    if not gaps:
        return None
    return max(gaps + [gap for attempt in attempts if (gap := _open_save_gap(attempt)) is not None])


def _open_save_gap(attempt: Attempt) -> float | None:
    """Seconds a running attempt's trainer has beaten since its newest checkpoint of its own (None: it has written
    none yet; the one it restored opens no gap, as in `record_checkpoint`)."""
    if attempt.ended_at is not None or attempt.first_checkpoint_at is None or attempt.checkpoint_at is None:
        return None
    return max((attempt.last_heartbeat_at or attempt.checkpoint_at) - attempt.checkpoint_at, 0.0)
