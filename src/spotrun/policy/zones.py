"""Small placement pieces the live controller and every policy share: which zone, and the highest spot price."""

from __future__ import annotations

import math
import random

from spotrun.policy.placement import PastAttempt, PlacementContext

# How long a refusal or a preemption keeps its zone at the end of the order: the deadline-aware policy's prior mean gap
ZONE_NEWS_LASTS = 3600.0
SPOT_THERE, NO_NEWS, BAD_NEWS = 0, 1, 2  # a zone's rank in the order: spot is there, no news, refused or lost lately


def zone_order(ctx: PlacementContext, news_lasts: float = ZONE_NEWS_LASTS) -> list[str]:
    """The zones, best first for spot, by the latest news of spot there from this job's and other jobs' tries:
    zones where spot is running or was just had, then zones with no news for `news_lasts` seconds, then zones where
    spot was refused or taken away within that time, the latest last. Zones with the same news go cheapest spot
    first, then in the job's own shuffled order (so that jobs spread over the zones), rotated so that the zone it
    last lost spot in comes last."""
    return _by_news(ctx, _spot_news(ctx, news_lasts))


def spot_zone_order(ctx: PlacementContext, news_lasts: float = ZONE_NEWS_LASTS) -> list[str]:
    """`zone_order`'s zones whose spot costs no more than the job pays for it (`PlacementContext.spot_within_cap`)."""
    return [zone for zone in zone_order(ctx, news_lasts) if ctx.spot_within_cap(zone)]


def _by_news(ctx: PlacementContext, news: dict[str, tuple[int, float]]) -> list[str]:
    return sorted(_own_order(ctx), key=lambda zone: (news.get(zone, (NO_NEWS, 0.0)), spot_price_rank(ctx, zone)))


def spot_price_rank(ctx: PlacementContext, zone: str) -> float:
    """Spot's $/h in `zone`, for sorting: zones whose price is not known rank alike, after the known ones."""
    price = ctx.spot_price_in(zone)
    return math.inf if price is None else price


def _own_order(ctx: PlacementContext) -> list[str]:
    order = list(ctx.zones)
    random.Random(ctx.job_id).shuffle(order)
    last = last_zone_with_instance(ctx.history)
    if last in order:
        i = order.index(last)
        order = order[i + 1 :] + order[: i + 1]
    return order


def zones_without_bad_news(ctx: PlacementContext, news_lasts: float = ZONE_NEWS_LASTS) -> list[str]:
    """`spot_zone_order`'s zones, best first, but none where spot was refused or taken away within `news_lasts`."""
    news = _spot_news(ctx, news_lasts)
    return [
        zone for zone in _by_news(ctx, news)
        if news.get(zone, (NO_NEWS, 0.0))[0] != BAD_NEWS and ctx.spot_within_cap(zone)
    ]


def _spot_news(ctx: PlacementContext, news_lasts: float) -> dict[str, tuple[int, float]]:
    """Per zone, its rank (0: spot is there, 2: spot was refused or lost lately) and, for rank 2, when: the latest
    observation wins, and a spot instance still running is news of now (`SpotLog.from_history`)."""
    log = ctx.spot_log()
    news: dict[str, tuple[int, float]] = {}
    for zone in ctx.zones:
        runs = log.zone(zone)
        if ctx.now - runs.last_seen > news_lasts:
            continue
        news[zone] = (SPOT_THERE, 0.0) if runs.available else (BAD_NEWS, runs.last_seen)
    return news


def zones_refused_to_others(ctx: PlacementContext, since: float) -> set[str]:
    """The zones whose latest news from other jobs' spot tries is a launch refused for lack of capacity at or after
    `since`. A refusal for the price is not counted (a job may bid more), nor a preemption (no try was made)."""
    latest: dict[str, tuple[float, bool]] = {}  # zone -> (when, refused); at the same instant spot seen wins
    for attempt in ctx.market:  # one pass without allocations: the market may hold 20,000 tries
        news = _capacity_news(attempt, ctx.now)
        if news is None:
            continue
        seen = latest.get(attempt.zone)
        if seen is None or news[0] > seen[0] or (news[0] == seen[0] and not news[1]):
            latest[attempt.zone] = news
    return {zone for zone, (at, refused) in latest.items() if refused and at >= since}


def _capacity_news(attempt: PastAttempt, now: float) -> tuple[float, bool] | None:
    """(when, refused) of what the try says of spot capacity, None if nothing."""
    if attempt.market != "spot":
        return None
    if attempt.end_reason == "no_capacity":
        return (attempt.ended_at if attempt.ended_at is not None else attempt.created_at, True)
    if attempt.started_at is None:
        return None
    if attempt.ended_at is None:  # still running: spot is there now
        return (max(now, attempt.started_at), False)
    return (attempt.started_at if attempt.taken_back else attempt.ended_at, False)


def last_zone_with_instance(history: tuple[PastAttempt, ...]) -> str | None:
    for attempt in reversed(history):
        if attempt.started_at is not None:
            return attempt.zone
    return None


def spot_zones_to_try(ctx: PlacementContext) -> list[str]:
    """Zones where spot may be had now at a price the job pays: told available first, then not known either way (a
    launch will tell), each cheapest first."""
    within = [z for z in ctx.zones if ctx.spot_within_cap(z)]
    known = [z for z in within if ctx.spot_known_now(z) is True]
    unknown = [z for z in within if ctx.spot_known_now(z) is None]
    by_price = lambda zone: spot_price_rank(ctx, zone)  # noqa: E731 - stable: equal prices keep the zones' order
    return sorted(known, key=by_price) + sorted(unknown, key=by_price)


def spot_priced_out(ctx: PlacementContext) -> bool:
    """Whether spot costs more than the job pays for it in every one of its zones."""
    return bool(ctx.zones) and not any(ctx.spot_within_cap(zone) for zone in ctx.zones)


def priced_out(ctx: PlacementContext) -> str:
    """Why no zone is tried where spot costs more than the job pays for it in all of them (`spot_priced_out`)."""
    cap = f"${ctx.max_spot_price:.4g}/h" if ctx.max_spot_price is not None else "its cap"
    return f"spot costs more than the job's max price ({cap}) in each of its {len(ctx.zones)} zones"


def longest_lived_zone(ctx: PlacementContext, candidates: list[str]) -> str:
    """Among `candidates`, the zone whose spot has lasted longest on average so far (ties: the cheaper spot, then
    the given order)."""
    log = ctx.spot_log()

    def mean_life(zone: str) -> float:
        runs = log.zone(zone)
        lives = list(runs.lifetimes)
        if runs.available:
            lives.append(ctx.now - runs.since)  # the run going on counts with what it has lasted so far
        return sum(lives) / len(lives) if lives else 0.0

    return max(candidates, key=lambda z: (mean_life(z), -spot_price_rank(ctx, z), -candidates.index(z)))


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
