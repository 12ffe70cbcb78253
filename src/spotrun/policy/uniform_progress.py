"""Uniform Progress, the policy of "Can't Be Late" (NSDI'24), by its rules:

1. Uniform progress: when the job is idle and behind the line C·t/D, go on-demand.
2. Take risks: take spot whenever it is available (also when behind), stay on it until preempted.
3. Hysteresis: on on-demand, stay while no spot is available and, with ``hysteresis_2d`` (the default, which
   reproduces the paper's numbers), until progress is ahead of where the line will be 2d from now.
4. Safety net: when idle or on on-demand and what is left plus 2d of restarts fills the time left, go (stay)
   on-demand to the end; once even one restart does not fit, only a running spot instance past its restart
   overhead may continue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spotrun.policy.deadline import DeadlineView, deadline_view
from spotrun.policy.placement import Decision, PlacementContext, RunningDecision, place_by_deciding
from spotrun.policy.requests import no_zone, spot_has_capacity, want_nothing, want_on_demand, want_spot


@dataclass(frozen=True)
class UniformProgressPolicy:
    name: str = "uniform_progress"
    # the markets it may choose whatever the job's spot.use_spot and spot.fallback say (`markets_conflict`)
    markets_regardless: ClassVar[frozenset[str]] = frozenset({"spot", "on-demand"})
    hysteresis_2d: bool = True

    def place(self, ctx: PlacementContext) -> Decision:
        return place_by_deciding(self, ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        if (refusal := no_zone(ctx)) is not None:
            return refusal
        view = deadline_view(ctx)
        if view is None:
            raise ValueError("uniform_progress needs the job's deadline and estimated_duration")
        market = self.market(ctx, view)
        if market == "spot":
            return want_spot(ctx, "uniform progress: spot")  # type: ignore[return-value]
        if market == "on-demand":
            return want_on_demand(ctx, "uniform progress: on-demand")
        return want_nothing(ctx, view.step, "uniform progress: ahead of the line, waiting for spot")

    def market(self, ctx: PlacementContext, view: DeadlineView) -> str | None:
        has_spot = spot_has_capacity(ctx)
        held = ctx.current.market if ctx.current is not None else None
        request = "spot" if has_spot else None
        if view.ahead_of_line() < 0:
            request = "spot" if has_spot else "on-demand"
        if held == "on-demand" and (not has_spot or (self.hysteresis_2d and view.ahead_of_line(2 * view.overhead) < 0)):
            request = "on-demand"
        if held != "spot" and view.steps_needed(2) >= view.time_left:
            request = "on-demand"
        if view.steps_needed(1) >= view.time_left:
            request = "spot" if held == "spot" and view.overhead_left < 1e-3 else "on-demand"
            if view.overhead == 0 and has_spot:
                request = "spot"
        return request
