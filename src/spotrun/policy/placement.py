"""What a placement policy sees and what it may answer. Pure data: no I/O, time is an argument.

Two questions are asked of a policy:

* ``place(ctx)`` — the job holds no instance: where should it run next (or wait, or give up)?
* ``decide(ctx)`` — asked every decision step, also while the job runs: keep the current instance, move it
  (``Launch`` of another market or zone: a voluntary checkpoint-and-move), release it (``Wait``) or give up.

``place`` is what the controller calls today; deadline-aware policies implement ``decide`` and answer ``place`` by
delegating to it. The fields after ``estimated_duration`` are the running-job view; they all have defaults so a
context built for ``place`` alone stays valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from spotrun.policy.observations import SpotLog

Market = Literal["spot", "on-demand"]

_NOTHING_KNOWN: Mapping[str, bool] = MappingProxyType({})
_NO_PRICES: Mapping[str, float] = MappingProxyType({})


class PastAttempt(NamedTuple):
    """One earlier try at running the job, as the controller recorded it. A named tuple: a job that waited days for
    spot has thousands of tries, and the controller builds them from rows at every placement."""

    zone: str
    market: Market
    created_at: float
    started_at: float | None  # None: never got an instance
    ended_at: float | None
    end_reason: str | None  # succeeded | failed | preempted | cancelled | lost | no_capacity | ...
    # Until when its work is taken as kept (None: until `ended_at`, or now while it runs). The controller notices a
    # try gone some time after its instance died; where the agent did not report the end, its last heartbeat was the
    # last sign of life, and a trainer loses what it did since its last save (see `spotrun.control.placement`).
    worked_until: float | None = None
    # The cloud took its instance back (or said it would), whatever its end: one stopping to move when the cloud's
    # reclaim came ends "migrated" (the job had chosen to leave), yet spot went in its zone all the same.
    reclaimed: bool = False

    @property
    def taken_back(self) -> bool:
        """Whether spot was taken back from this try: news of its zone's market, however the try ended."""
        return self.end_reason == "preempted" or self.reclaimed


@dataclass(frozen=True)
class Placement:
    """The instance the job holds now."""

    zone: str
    market: Market
    since: float  # when it started (the restart overhead is paid from here)


# A spot answer (a launch refused for lack of capacity, spot seen running) stays news of "now" for at least this long:
# asked every minute, a policy that wants spot tried it again every minute where it had just been refused, each try
# a cloud API call and an attempt row that mostly heard the same answer (docs/benchmarks.md, "Twentieth round").
SPOT_NEWS_LASTS = 240.0


def within_cap(price: float, cap: float) -> bool:
    """Whether spot at `price` is taken from a launch bidding `cap` (the live provider refuses it above: "price too
    low"); a rounding's worth above counts as within."""
    return price <= cap * (1 + 1e-12)


def spot_news_lasts(step: float | None) -> float:
    """Seconds a spot answer stays news: half the caller's interval (it asks again a moment later), at least
    SPOT_NEWS_LASTS."""
    return max((step if step is not None else 60.0) / 2, SPOT_NEWS_LASTS)


@dataclass(frozen=True)
class PlacementContext:
    job_id: int
    now: float
    zones: tuple[str, ...]  # the zones the job may use, in the spec's (or provider's) order
    use_spot: bool
    fallback: Literal["on-demand", "wait"]
    submitted_at: float
    preemptions_before_fallback: int
    fallback_window: float
    capacity_rounds: int = 0  # how many times the job already waited because no zone had capacity
    waited_until: float | None = None  # when its latest wait ended (None: never waited): its tries since are this round's
    # The job's own tries, in order: the controller's include the open ones (the instance held, a gang's every node);
    # the simulator's hold ended tries only and give `progress`. What is counted from them counts over time or by
    # event (`deadline.progress_from_history`, `default.count_events`), so both read alike.
    history: tuple[PastAttempt, ...] = field(default_factory=tuple)
    # Other jobs' spot tries of the same instance type, oldest first: what the market has shown lately
    market: tuple[PastAttempt, ...] = field(default_factory=tuple)
    deadline: float | None = None  # absolute, same clock as `now`
    estimated_duration: float | None = None  # seconds of compute the whole job needs
    nodes: int = 1  # instances the job runs on at once (a gang's size): it progresses only while all of them run
    # ---- the running-job view (decide) ----
    current: Placement | None = None
    progress: float | None = None  # seconds of compute done so far (None: unknown, counted from history)
    restart_overhead: float | None = None  # seconds of no progress after each start (None: the policy's own guess)
    step: float | None = None  # seconds until the policy is asked again (the simulator's tick, the controller's period)
    spot: SpotLog | None = None  # what has been seen of spot per zone (None: derived from `history`)
    spot_price: float | None = None  # $/h of the job's instance type on spot (None: the policy's own ratio)
    on_demand_price: float | None = None  # $/h on-demand
    # $/h of spot in each zone where it is known and may differ between zones (a zone not named: `spot_price`)
    spot_prices: Mapping[str, float] = field(default_factory=lambda: _NO_PRICES)
    max_spot_price: float | None = None  # the most the job pays for spot an hour (None: no cap known)
    spot_now: Mapping[str, bool] = field(default_factory=lambda: _NOTHING_KNOWN)  # availability known at `now` without trying (simulator's paper model)
    # Whether moving off the instance held gives it up before the new one is tried (a refused spot try then costs a
    # fresh start; the simulator's "drain-first" view); False: the new one is tried first, as the live controller does
    moves_drain_first: bool = False
    # Seconds of training a preemption without notice may lose, the longest the trainer went between two checkpoints
    # it reported (None: not known yet, any amount; 0: none, as in the simulator, which keeps all progress)
    save_interval: float | None = None
    # Seconds a move keeps the instance held running, and billed, after launching the new one (make-before-break, as
    # the live controller moves, billing by the second); None: moves are instant and steps billed whole (the
    # simulator's model)
    move_overlap: float | None = None

    def spot_log(self) -> SpotLog:
        """What is known of spot per zone: `spot` when given, else what this job's and the market's tries tell."""
        return self.spot if self.spot is not None else self._tries_log

    @cached_property
    def _tries_log(self) -> SpotLog:
        # built once per context: a decision reads it several times, and the market may hold thousands of tries
        return SpotLog.from_history((*self.market, *self.history), now=self.now)

    @property
    def spot_held_in(self) -> str | None:
        """The zone of the spot instance the job holds (None: it holds none, or an on-demand one)."""
        current = self.current
        return current.zone if current is not None and current.market == "spot" else None

    def spot_price_in(self, zone: str) -> float | None:
        """$/h of spot in `zone` as far as it is known: the zone's own price, else the job's."""
        return self.spot_prices.get(zone, self.spot_price)

    def spot_within_cap(self, zone: str) -> bool:
        """Whether spot in `zone` costs no more than the job pays for it, as far as is known (a launch above the cap
        is refused for the price, and tells nothing new). The spot instance held counts as within: it runs."""
        if self.spot_held_in == zone:
            return True
        price = self.spot_price_in(zone)
        return price is None or self.max_spot_price is None or within_cap(price, self.max_spot_price)

    def spot_known_now(self, zone: str) -> bool | None:
        """True / False when this instant's spot capacity in `zone` is known (told, or a launch just tried), else None."""
        known = self.spot_now.get(zone)
        if known is not None:
            return known
        if self.spot_held_in == zone:
            return True
        return self.spot_log().seen_at(zone, self.now - spot_news_lasts(self.step))


@dataclass(frozen=True)
class Launch:
    zone: str
    market: Market
    reason: str


@dataclass(frozen=True)
class Wait:
    until: float
    reason: str


@dataclass(frozen=True)
class GiveUp:
    reason: str


@dataclass(frozen=True)
class Keep:
    """Stay on the current instance."""

    reason: str


Decision = Launch | Wait | GiveUp
RunningDecision = Keep | Launch | Wait | GiveUp


class PlacementPolicy(Protocol):
    name: str

    def place(self, ctx: PlacementContext) -> Decision: ...


@runtime_checkable
class StepPolicy(Protocol):
    """A policy that can also be asked while the job runs (see the module docstring)."""

    name: str

    def place(self, ctx: PlacementContext) -> Decision: ...

    def decide(self, ctx: PlacementContext) -> RunningDecision: ...


def place_by_deciding(policy: StepPolicy, ctx: PlacementContext) -> Decision:
    """`place` for a policy written as `decide`: with no instance held, `Keep` cannot come back."""
    decision = policy.decide(ctx if ctx.current is None else _without_instance(ctx))
    if isinstance(decision, Keep):
        raise AssertionError(f"{policy.name}: answered Keep while the job holds no instance")
    return decision


def _without_instance(ctx: PlacementContext) -> PlacementContext:
    return replace(ctx, current=None)
