"""Where a deadline job stands: work left, time left, slack, in the step the policy is asked at.

Rounding follows the paper's simulator: time left is counted in whole steps (floor), and work still to do
(plus restart overheads) in whole steps (ceil), because an instance is billed and checked once per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotrun.policy.placement import PlacementContext

DEFAULT_RESTART_OVERHEAD = 360.0  # seconds; the paper's 0.1 h, used when the controller cannot tell
DEFAULT_STEP = 60.0  # seconds between two questions when the caller does not say
EPSILON = 1e-3


@dataclass(frozen=True)
class DeadlineView:
    now: float
    started: float  # when the job was submitted: t = 0 of the uniform-progress line
    deadline: float
    compute: float  # C: seconds of compute the job needs
    done: float  # seconds of compute done
    overhead: float  # d
    step: float
    overhead_left: float  # of the current instance's start

    @property
    def work_left(self) -> float:
        return max(self.compute - self.done, 0.0)

    @property
    def finished(self) -> bool:
        return self.work_left <= EPSILON

    @property
    def time_left(self) -> float:
        """Whole steps left before the deadline."""
        return math.floor(max(self.deadline - self.now, 0.0) / self.step + 1e-9) * self.step

    def steps_needed(self, restarts: float) -> float:
        """Seconds of whole steps needed to finish from here after `restarts` more restart overheads."""
        return math.ceil((self.work_left + restarts * self.overhead) / self.step - 1e-9) * self.step

    @property
    def slack(self) -> float:
        return self.time_left - self.work_left

    def ahead_of_line(self, horizon: float = 0.0) -> float:
        """Progress minus where the uniform-progress line C·t/D is `horizon` seconds from now (< 0: behind)."""
        span = self.deadline - self.started
        return self.done - (self.now + horizon - self.started) * self.compute / span


def can_plan(ctx: PlacementContext) -> bool:
    """Whether the job has a deadline and a known amount of compute: what a deadline planner needs."""
    return ctx.deadline is not None and ctx.estimated_duration is not None


def deadline_view(ctx: PlacementContext, default_overhead: float = DEFAULT_RESTART_OVERHEAD) -> DeadlineView | None:
    """The view for a job with a deadline and a known amount of compute; None for any other job."""
    if ctx.deadline is None or ctx.estimated_duration is None:  # not can_plan(ctx), spelled out for the type checker
        return None
    overhead = ctx.restart_overhead if ctx.restart_overhead is not None else default_overhead
    overhead_left = 0.0
    if ctx.current is not None:
        overhead_left = max(ctx.current.since + overhead - ctx.now, 0.0)
    return DeadlineView(
        now=ctx.now,
        started=ctx.submitted_at,
        deadline=ctx.deadline,
        compute=ctx.estimated_duration,
        done=ctx.progress if ctx.progress is not None else progress_from_history(ctx, overhead),
        overhead=overhead,
        step=ctx.step if ctx.step is not None else DEFAULT_STEP,
        overhead_left=overhead_left,
    )


def progress_from_history(ctx: PlacementContext, overhead: float) -> float:
    """Compute done, estimated as the time instances ran minus one restart overhead each (no progress reports)."""
    ran = sum(
        max((a.ended_at if a.ended_at is not None else ctx.now) - a.started_at - overhead, 0.0)
        for a in ctx.history
        if a.started_at is not None
    )
    if ctx.current is not None:
        ran += max(ctx.now - ctx.current.since - overhead, 0.0)
    return ran
