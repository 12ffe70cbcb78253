"""Small placement pieces the live controller and every policy share: which zone, and the highest spot price."""

from __future__ import annotations

import random

from spotrun.policy.placement import PastAttempt, PlacementContext


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


def spot_zones_to_try(ctx: PlacementContext) -> list[str]:
    """Zones where spot may be had now: told available first, then not known either way (a launch will tell)."""
    known = [z for z in ctx.zones if ctx.spot_known_now(z) is True]
    unknown = [z for z in ctx.zones if ctx.spot_known_now(z) is None]
    return known + unknown


def longest_lived_zone(ctx: PlacementContext, candidates: list[str]) -> str:
    """Among `candidates`, the zone whose spot has lasted longest on average so far (ties: the given order)."""
    log = ctx.spot_log()

    def mean_life(zone: str) -> float:
        runs = log.zone(zone)
        lives = list(runs.lifetimes)
        if runs.available:
            lives.append(ctx.now - runs.since)  # the run going on counts with what it has lasted so far
        return sum(lives) / len(lives) if lives else 0.0

    return max(candidates, key=lambda z: (mean_life(z), -candidates.index(z)))


def on_demand_zone(ctx: PlacementContext) -> str:
    """On-demand has capacity everywhere: stay where the job is, else the first zone of its order."""
    if ctx.current is not None:
        return ctx.current.zone
    return ctx.zones[0]


def max_spot_price(on_demand_price: float, user_max: float | None = None) -> float:
    """The bid cap for a spot launch: the user's, else the on-demand price (spot above it is never worth it)."""
    if user_max is not None:
        if user_max <= 0:
            raise ValueError(f"max spot price must be positive, got {user_max}")
        return user_max
    return on_demand_price
