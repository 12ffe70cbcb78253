"""Turning "I want spot / on-demand / nothing for the next step" into an answer relative to what the job holds."""

from __future__ import annotations

from collections.abc import Callable

from spotrun.policy.placement import GiveUp, Keep, Launch, PlacementContext, RunningDecision, Wait
from spotrun.policy.zones import on_demand_zone, spot_zones_to_try

SpotZonePicker = Callable[[PlacementContext, list[str]], str]


def first_zone(ctx: PlacementContext, candidates: list[str]) -> str:
    return candidates[0]


def want_spot(ctx: PlacementContext, reason: str, pick: SpotZonePicker = first_zone) -> RunningDecision | None:
    """Keep the spot instance held, else launch spot where it may be had; None when every zone is known to be out."""
    if ctx.spot_held_in is not None:
        return Keep(reason)
    candidates = spot_zones_to_try(ctx)
    if not candidates:
        return None
    return Launch(pick(ctx, candidates), "spot", reason)


def want_on_demand(ctx: PlacementContext, reason: str) -> RunningDecision:
    if ctx.current is not None and ctx.current.market == "on-demand":
        return Keep(reason)
    return Launch(on_demand_zone(ctx), "on-demand", reason)


def want_nothing(ctx: PlacementContext, step: float, reason: str) -> RunningDecision:
    return Wait(ctx.now + step, reason)


def no_zone(ctx: PlacementContext) -> GiveUp | None:
    if not ctx.zones:
        return GiveUp("none of the job's zones offers its instance type (with its accelerators, where the cloud "
                      "attaches them apart)")
    return None


def spot_has_capacity(ctx: PlacementContext) -> bool:
    """Spot may be had now somewhere (held, told available, or not known to be out)."""
    if ctx.spot_held_in is not None:
        return True
    return bool(spot_zones_to_try(ctx))
