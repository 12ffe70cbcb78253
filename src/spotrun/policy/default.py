"""The default placement policy.

Without a deadline (or without an estimated duration, or with ``fallback: wait``): spot first, zones ordered by the
latest news of spot there from every job's tries (`zones.zone_order`), back off when all are out, on-demand once spot
keeps getting taken away, and back to spot after a while (one fallback window, doubling with each return that ended
on on-demand again) in a zone with no bad news, the on-demand instance running until the spot one is up. With a
deadline and an estimated duration: the deadline-aware policy (`spotrun.policy.deadline_aware`), which beats Uniform
Progress.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from spotrun.policy.deadline import can_plan
from spotrun.policy.deadline_aware import DeadlineAwarePolicy
from spotrun.policy.observations import CAPACITY_MISSES
from spotrun.policy.placement import (
    Decision, Keep, Launch, PastAttempt, PlacementContext, RunningDecision, Wait, place_by_deciding,
)
from spotrun.policy.requests import no_zone
from spotrun.policy.zones import (
    ZONE_NEWS_LASTS, priced_out, spot_zone_order, zone_order, zones_refused_to_others, zones_without_bad_news,
)


@dataclass(frozen=True)
class DefaultPolicy:
    name: str = "default"
    # follows the job's spot.use_spot and spot.fallback: no market it may choose regardless (`markets_conflict`)
    markets_regardless: ClassVar[frozenset[str]] = frozenset()
    backoff_base: float = 5.0
    backoff_max: float = 300.0
    # With fallback "on-demand": after this many rounds in which no zone had spot capacity, use on-demand.
    empty_rounds_before_fallback: int = 2
    # How long a "no capacity" answer or a preemption (this job's or another's) puts its zone at the end of the order
    zone_news_lasts: float = ZONE_NEWS_LASTS
    deadline_policy: DeadlineAwarePolicy = field(default_factory=DeadlineAwarePolicy)
    # A job that fell back to on-demand holds it this many fallback windows at most before trying spot again
    max_hold_windows: int = 16

    def place(self, ctx: PlacementContext) -> Decision:
        if self._has_deadline(ctx):
            return place_by_deciding(self, ctx)
        return self._place_without_deadline(ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        """With a deadline and an estimated duration: the deadline-aware policy. Otherwise keep a running instance
        (a fallen-back on-demand one only for a while) and place as before."""
        if self._has_deadline(ctx):
            return self.deadline_policy.decide(ctx)
        if ctx.current is None:
            return self._place_without_deadline(ctx)
        return self._back_to_spot(ctx) or Keep("running")

    def _back_to_spot(self, ctx: PlacementContext) -> Launch | None:
        """Spot again for a job that fell back to on-demand, once it has held on-demand for its hold (a fallback
        window; doubled for each earlier return to spot that ended on on-demand again, a market that keeps failing),
        the preemptions that made it fall back are out of the window, and some zone has had no spot refused or taken
        away lately. The controller moves make-before-break, so a try that finds no spot costs nothing more."""
        current = ctx.current
        if current is None or not fell_back_to_on_demand(current.market, ctx.use_spot, ctx.fallback):
            return None
        held = ctx.now - current.since
        hold = ctx.fallback_window * min(2 ** returns_to_spot(ctx.history), self.max_hold_windows)
        if held < hold or recent_preemptions(ctx.history, ctx.now, ctx.fallback_window) >= ctx.preemptions_before_fallback:
            return None
        zones = zones_without_bad_news(ctx, self.zone_news_lasts)
        if not zones:
            return None
        return Launch(zones[0], "spot", f"on on-demand for {held / 60:.0f} min: trying spot in {zones[0]} again")

    @staticmethod
    def _has_deadline(ctx: PlacementContext) -> bool:
        return ctx.use_spot and ctx.fallback == "on-demand" and can_plan(ctx)

    def _place_without_deadline(self, ctx: PlacementContext) -> Decision:
        if (nowhere := no_zone(ctx)) is not None:
            return nowhere
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
        """One round tries every zone once, in the order the latest news gives (which may change within the round:
        a zone is skipped because it was tried, not because of where it stands); then wait, or fall back. A zone
        where another job was refused spot within the wait this job would take is skipped too: that try already told,
        so jobs waiting in one market ask the cloud about as often as one job would. A zone whose spot costs more
        than the job pays for it is not tried: the cloud would refuse it for the price."""
        order = spot_zone_order(ctx, self.zone_news_lasts)
        delay = backoff_delay(ctx.capacity_rounds, self.backoff_base, self.backoff_max)
        tried = {miss.zone for miss in this_rounds_misses(ctx)}
        told = zones_refused_to_others(ctx, since=ctx.now - delay)
        left = [zone for zone in order if zone not in tried and zone not in told]
        if left:
            reason = "spot" if not tried else f"spot, next zone after {len(tried)} without capacity"
            return Launch(left[0], "spot", reason)
        none = "no spot capacity in any zone" if order else priced_out(ctx)
        if ctx.fallback == "on-demand" and ctx.capacity_rounds + 1 >= self.empty_rounds_before_fallback:
            return Launch(self._on_demand_zone(ctx), "on-demand", f"{none}: on-demand")
        if not order:
            return Wait(ctx.now + delay, f"{none}: waiting {delay:.0f} s")
        others = len(told - tried)
        refused_elsewhere = f" ({others} refused to another job in the last {delay:.0f} s)" if others else ""
        return Wait(
            ctx.now + delay, f"no spot capacity in any of {len(order)} zones{refused_elsewhere}: waiting {delay:.0f} s"
        )

    def _on_demand_zone(self, ctx: PlacementContext) -> str:
        return zone_order(ctx, self.zone_news_lasts)[0]


def fell_back_to_on_demand(market: str, use_spot: bool, fallback: str) -> bool:
    """Whether a job on `market` holds on-demand it would leave for spot: it uses spot and falls back to on-demand
    only when spot fails. (The controller asks a running job's policy only when this holds or it has a deadline.)"""
    return market == "on-demand" and use_spot and fallback == "on-demand"


def backoff_delay(rounds: int, base: float, cap: float) -> float:
    """Seconds to wait after `rounds` earlier waits: doubling from `base`, at most `cap`."""
    return min(base * 2**rounds, cap)


def trailing_capacity_misses(history: tuple[PastAttempt, ...]) -> list[PastAttempt]:
    """The launch tries since the job last ran that failed for lack of spot capacity. A multi-node job's nodes given
    back because another node of the gang was refused ("released") neither ran nor were refused: they are skipped."""
    misses: list[PastAttempt] = []
    for attempt in reversed(history):
        if attempt.end_reason == "released":
            continue
        if attempt.end_reason not in CAPACITY_MISSES:
            break
        misses.append(attempt)
    return misses


def this_rounds_misses(ctx: PlacementContext) -> list[PastAttempt]:
    """The job's tries refused for lack of spot since its latest wait ended (all since it last ran, if it has not
    waited since)."""
    misses = trailing_capacity_misses(ctx.history)
    if ctx.waited_until is None:
        return misses
    return [miss for miss in misses if miss.created_at >= ctx.waited_until]


def returns_to_spot(history: tuple[PastAttempt, ...]) -> int:
    """How often the job left on-demand for spot (each such move ends the on-demand attempts "migrated")."""
    return count_events(a for a in history if a.market == "on-demand" and a.end_reason == "migrated")


def recent_preemptions(history: tuple[PastAttempt, ...], now: float, window: float) -> int:
    """How often spot was taken from the job in the last `window` seconds."""
    return count_events(
        a for a in history if a.end_reason == "preempted" and a.ended_at is not None and a.ended_at >= now - window
    )


def count_events(ended: Iterable[PastAttempt]) -> int:
    """How many times the job lived through such ends: a gang's nodes end together (and a zone's reclaim may take them
    a minute apart), so a try launched before the latest event's first end belongs to that event; a try launched
    after it (a replacement, the next attempt) ends in an event of its own."""
    events, first_end = 0, None
    for attempt, end in sorted(((a, _end(a)) for a in ended), key=lambda pair: pair[1]):
        if first_end is None or attempt.created_at >= first_end:
            events, first_end = events + 1, end
    return events


def _end(attempt: PastAttempt) -> float:
    return attempt.ended_at if attempt.ended_at is not None else math.inf  # still ending: it ends now or later
