"""Where a deadline job stands: work left, time left, slack, in the step the policy is asked at.

Rounding follows the paper's simulator: time left is counted in whole steps (floor), and work still to do
(plus restart overheads) in whole steps (ceil), because an instance is billed and checked once per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotrun.policy.placement import PastAttempt, PlacementContext

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
        """Compute still to do. A job asked about still needs an instance to end, so once the estimate is used up
        (it was too short, or the trainer reported its last step but did not exit) it is not "done": it is taken
        to need as much again as it has overrun the estimate by, and at least one more step."""
        left = self.compute - self.done
        if left > EPSILON:
            return left
        return max(self.done - self.compute, 0.0) + self.step

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
    """Compute done when the trainer reports none: the time during which all of the job's nodes had instances up
    for longer than a restart overhead. Counted over time, not summed per try: a gang's nodes run side by side, and
    a move's new instance starts while the old one still runs. The instance held counts through its try when the
    history holds it (the controller's), else on its own (a caller whose history holds ended tries only)."""
    spans = [(a.started_at + overhead, _worked_until(a, ctx.now)) for a in ctx.history if a.started_at is not None]
    holds_an_open_try = any(a.started_at is not None and a.ended_at is None for a in ctx.history)
    if ctx.current is not None and not holds_an_open_try:
        spans.append((ctx.current.since + overhead, ctx.now))
    return time_covered(spans, at_least=ctx.nodes)


def _worked_until(attempt: PastAttempt, now: float) -> float:
    if attempt.worked_until is not None:
        return attempt.worked_until
    return attempt.ended_at if attempt.ended_at is not None else now


def time_covered(spans: list[tuple[float, float]], at_least: int = 1) -> float:
    """Seconds during which at least `at_least` of the (start, end) spans overlap."""
    edges = sorted(edge for start, end in spans if end > start for edge in ((start, 1), (end, -1)))
    covered, depth, since = 0.0, 0, 0.0
    for at, change in edges:
        if depth >= at_least:
            covered += at - since
        depth, since = depth + change, at
    return covered
