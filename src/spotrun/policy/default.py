"""The default placement policy: spot first, zones in a per-job shuffled order, back off when all are out,
on-demand once spot keeps getting taken away."""

from __future__ import annotations

import random
from dataclasses import dataclass

from spotrun.policy.placement import Decision, GiveUp, Launch, PastAttempt, PlacementContext, Wait

CAPACITY_MISSES = frozenset({"no_capacity", "price_too_low"})


@dataclass(frozen=True)
class DefaultPolicy:
    name: str = "default"
    backoff_base: float = 5.0
    backoff_max: float = 300.0
    # With fallback "on-demand": after this many rounds in which no zone had spot capacity, use on-demand.
    empty_rounds_before_fallback: int = 2

    def place(self, ctx: PlacementContext) -> Decision:
        if not ctx.zones:
            return GiveUp("none of the job's zones is offered for its instance type")
        if not ctx.use_spot:
            return Launch(self._on_demand_zone(ctx), "on-demand", "the job does not use spot")
        recent = recent_preemptions(ctx.history, ctx.now, ctx.fallback_window)
        if ctx.fallback == "on-demand" and recent >= ctx.preemptions_before_fallback:
            return Launch(
                self._on_demand_zone(ctx),
                "on-demand",
                f"{recent} preemptions in the last {ctx.fallback_window:.0f} s: falling back to on-demand",
            )
        return self._place_spot(ctx)

    def _place_spot(self, ctx: PlacementContext) -> Decision:
        order = zone_order(ctx)
        misses = len(trailing_capacity_misses(ctx.history))
        tried_this_round = misses - ctx.capacity_rounds * len(order)
        if tried_this_round < len(order):
            zone = order[max(tried_this_round, 0)]
            reason = "spot" if tried_this_round <= 0 else f"spot, next zone after {tried_this_round} without capacity"
            return Launch(zone, "spot", reason)
        if ctx.fallback == "on-demand" and ctx.capacity_rounds + 1 >= self.empty_rounds_before_fallback:
            return Launch(self._on_demand_zone(ctx), "on-demand", "no spot capacity in any zone: on-demand")
        delay = min(self.backoff_base * 2**ctx.capacity_rounds, self.backoff_max)
        return Wait(ctx.now + delay, f"no spot capacity in any of {len(order)} zones: waiting {delay:.0f} s")

    def _on_demand_zone(self, ctx: PlacementContext) -> str:
        return zone_order(ctx)[0]


def zone_order(ctx: PlacementContext) -> list[str]:
    """The job's own shuffled zone order, rotated so that the zone it last lost spot in comes last."""
    order = list(ctx.zones)
    random.Random(ctx.job_id).shuffle(order)
    last = last_zone_with_instance(ctx.history)
    if last in order:
        i = order.index(last)
        order = order[i + 1 :] + order[: i + 1]
    return order


def last_zone_with_instance(history: tuple[PastAttempt, ...]) -> str | None:
    for attempt in reversed(history):
        if attempt.started_at is not None:
            return attempt.zone
    return None


def trailing_capacity_misses(history: tuple[PastAttempt, ...]) -> list[PastAttempt]:
    """The launch tries since the job last held an instance that failed for lack of spot capacity."""
    misses: list[PastAttempt] = []
    for attempt in reversed(history):
        if attempt.end_reason not in CAPACITY_MISSES:
            break
        misses.append(attempt)
    return misses


def recent_preemptions(history: tuple[PastAttempt, ...], now: float, window: float) -> int:
    return sum(
        1 for a in history if a.end_reason == "preempted" and a.ended_at is not None and a.ended_at >= now - window
    )
