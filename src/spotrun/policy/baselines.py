"""Baselines: always on-demand, and greedy (spot whenever it can be had; on-demand once the deadline forces it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spotrun.policy.deadline import DEFAULT_STEP, deadline_view
from spotrun.policy.placement import Decision, PlacementContext, RunningDecision, place_by_deciding
from spotrun.policy.requests import no_zone, spot_has_capacity, want_nothing, want_on_demand, want_spot


@dataclass(frozen=True)
class OnDemandPolicy:
    name: str = "on_demand"
    # the markets it may choose whatever the job's spot.use_spot and spot.fallback say (`markets_conflict`)
    markets_regardless: ClassVar[frozenset[str]] = frozenset({"on-demand"})

    def place(self, ctx: PlacementContext) -> Decision:
        return place_by_deciding(self, ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        return no_zone(ctx) or want_on_demand(ctx, "on-demand only")


@dataclass(frozen=True)
class GreedyPolicy:
    """Spot whenever available, idle otherwise; once what is left (plus one restart) fills the time left, go
    on-demand and stay there, except that a spot instance already up keeps running until it is preempted."""

    name: str = "greedy"
    # the markets it may choose whatever the job's spot.use_spot and spot.fallback say (`markets_conflict`)
    markets_regardless: ClassVar[frozenset[str]] = frozenset({"spot", "on-demand"})

    def place(self, ctx: PlacementContext) -> Decision:
        return place_by_deciding(self, ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        if (refusal := no_zone(ctx)) is not None:
            return refusal
        view = deadline_view(ctx)
        step = view.step if view is not None else (ctx.step or DEFAULT_STEP)
        if view is not None and view.steps_needed(1) >= view.time_left:
            if ctx.spot_held_in is not None and view.overhead_left < 1e-3:
                return want_spot(ctx, "deadline near: keep the spot instance until it is preempted")  # type: ignore[return-value]
            return want_on_demand(ctx, "deadline near: on-demand to finish in time")
        if spot_has_capacity(ctx):
            return want_spot(ctx, "spot while it can be had")  # type: ignore[return-value]
        return want_nothing(ctx, step, "no spot: waiting")
