"""The offline optimum: knowing every zone's future spot availability, the cheapest way to finish by the deadline.

Dynamic programming over time steps × progress × what the job holds, under the paper simulator's model: time moves
in steps; each step on an instance is billed whole; a start (or restart, or move to another zone or market) makes no
progress for the restart overhead (which may span several steps); a spot instance running in step t-1 is lost when
step t has no spot. Progress is counted exactly, in units of gcd(step, overhead) seconds.

`optimal_cost` is the lower bound the simulator reports; `OmniscientPolicy` follows the optimal plan step by step so
the very same engine that runs every other policy can replay (and check) it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from spotrun.policy.placement import Decision, Keep, Launch, PlacementContext, RunningDecision, Wait, place_by_deciding

INFINITE = np.inf


@dataclass(frozen=True)
class Problem:
    available: np.ndarray  # bool, (zones, steps): spot capacity per zone in each step from the job's start
    step: float
    compute: float
    deadline: float  # seconds after the start
    overhead: float
    spot_price: float  # per hour
    on_demand_price: float  # per hour
    zone_spot_prices: tuple[float, ...] = ()  # per hour, per availability row, where the zones' prices differ

    @cached_property
    def spot_step_costs(self) -> list[float]:
        """What a step of spot costs in each zone (asked at every step of a run: computed once)."""
        prices = self.zone_spot_prices or (self.spot_price,) * self.available.shape[0]
        if len(prices) != self.available.shape[0]:
            raise ValueError(f"omniscient: {len(prices)} zone prices for {self.available.shape[0]} availability rows")
        return [price * self.step / 3600 for price in prices]

    @cached_property
    def unit(self) -> int:
        step, overhead = _whole_seconds(self.step, "step"), _whole_seconds(self.overhead, "overhead")
        return math.gcd(step, overhead) if overhead else step

    @cached_property
    def steps(self) -> int:
        return int(math.floor(self.deadline / self.step + 1e-9))

    @cached_property
    def ages(self) -> int:
        """Steps after a start by which the restart overhead is surely paid (age is capped there)."""
        return max(1, math.ceil(self.overhead / self.step - 1e-9))

    def work(self, age: int) -> int:
        """Progress units made in a step by an instance that has already run `age` steps."""
        return self._works[min(age, self.ages)]

    @cached_property
    def _works(self) -> tuple[int, ...]:
        lost = [min(max(self.overhead - age * self.step, 0.0), self.step) for age in range(self.ages + 1)]
        return tuple(round((self.step - x) / self.unit) for x in lost)

    @cached_property
    def goal(self) -> int:
        return math.ceil(self.compute / self.unit - 1e-9)


def _whole_seconds(value: float, what: str) -> int:
    if value < 0 or abs(value - round(value)) > 1e-6:
        raise ValueError(f"omniscient: {what} must be a whole, non-negative number of seconds, got {value}")
    return round(value)


class _States:
    """Row layout of a value table: idle, on-demand by age, then spot by zone and age."""

    def __init__(self, zones: int, ages: int) -> None:
        self.zones, self.ages = zones, ages
        self.count = 1 + ages + zones * ages

    def on_demand(self, age: int) -> int:
        return age  # ages 1..A

    def spot(self, zone: int, age: int) -> int:
        return 1 + self.ages + zone * self.ages + age - 1


def value_tables(problem: Problem, keep: bool = True) -> list[np.ndarray] | np.ndarray:
    """Cost-to-go V[t][state, progress] for t = 0..T (all of them when `keep`, else only V[0])."""
    zones, length = problem.available.shape
    horizon = problem.steps
    if length < horizon:
        raise ValueError(f"omniscient: availability covers {length} steps, the deadline needs {horizon}")
    states = _States(zones, problem.ages)
    goal, ages = problem.goal, problem.ages
    works = [problem.work(a) for a in range(ages + 1)]
    spot_costs = problem.spot_step_costs
    od_cost = problem.on_demand_price * problem.step / 3600
    nxt = np.full((states.count, goal + 1), INFINITE)
    nxt[:, goal] = 0.0
    tables = [nxt] if keep else []
    for t in range(horizon - 1, -1, -1):
        nxt = _step_back(nxt, problem.available[:, t], states, works, spot_costs, od_cost)
        if keep:
            tables.append(nxt)
    if keep:
        tables.reverse()
        return tables
    return nxt


def _step_back(nxt, available, states: _States, works, spot_costs, od_cost) -> np.ndarray:
    """V[t] from V[t+1]. Every row that does not keep its instance falls back to `fresh`, the best of idling and
    starting anew; an on-demand row may also keep it, a spot row too where its zone still has spot (numpy calls are
    what this costs: each is written into place, and shared terms are computed once)."""
    ages = states.ages
    idle = nxt[0]
    now = np.empty_like(nxt)
    fresh = now[0]
    np.minimum(idle, _plus_shifted(od_cost, nxt[states.on_demand(1)], works[0]), out=fresh)
    spot_start = None
    for z in range(states.zones):
        if available[z]:
            start = _plus_shifted(spot_costs[z], nxt[states.spot(z, 1)], works[0])
            spot_start = start if spot_start is None else np.minimum(spot_start, start, out=spot_start)
    idle_or_spot = idle if spot_start is None else np.minimum(idle, spot_start)
    if spot_start is not None:
        np.minimum(fresh, spot_start, out=fresh)
    for age in range(1, ages + 1):
        after = min(age + 1, ages)
        od_keep = _plus_shifted(od_cost, nxt[states.on_demand(after)], works[age])
        np.minimum(idle_or_spot, od_keep, out=now[states.on_demand(age)])
        for z in range(states.zones):
            if available[z]:
                spot_keep = _plus_shifted(spot_costs[z], nxt[states.spot(z, after)], works[age])
                np.minimum(fresh, spot_keep, out=now[states.spot(z, age)])
            else:
                now[states.spot(z, age)] = fresh
    now[:, -1] = 0.0
    return now


def _plus_shifted(cost: float, row: np.ndarray, by: int) -> np.ndarray:
    """cost + row[min(p + by, last)]: a step's cost plus the value after making `by` more units of progress."""
    out = np.empty_like(row)
    if by == 0:
        return np.add(row, cost, out=out)
    np.add(row[by:], cost, out=out[:-by])
    out[-by:] = row[-1] + cost
    return out


def optimal_cost(problem: Problem) -> float:
    """The least cost of finishing by the deadline (inf when even on-demand from the start cannot)."""
    return float(value_tables(problem, keep=False)[0, 0])


@dataclass(frozen=True, eq=False)
class OmniscientPolicy:
    """Follows the optimal plan; knows the future, so it only exists inside the simulator."""

    problem: Problem
    zones: tuple[str, ...]
    started: float  # the job's start, in the same clock as ctx.now
    tables: tuple[np.ndarray, ...]
    name: str = "omniscient"

    @classmethod
    def plan(cls, problem: Problem, zones: tuple[str, ...], started: float = 0.0) -> OmniscientPolicy:
        if len(zones) != problem.available.shape[0]:
            raise ValueError(f"omniscient: {len(zones)} zone names for {problem.available.shape[0]} availability rows")
        return cls(problem, zones, started, tuple(value_tables(problem)))

    @property
    def cost(self) -> float:
        return float(self.tables[0][0, 0])

    def place(self, ctx: PlacementContext) -> Decision:
        return place_by_deciding(self, ctx)

    def decide(self, ctx: PlacementContext) -> RunningDecision:
        problem, states = self.problem, _States(len(self.zones), self.problem.ages)
        t = round((ctx.now - self.started) / problem.step)
        if t >= problem.steps:
            return _fallback(ctx, "omniscient: past the deadline")
        progress = min(round((ctx.progress or 0.0) / problem.unit), problem.goal)
        nxt = self.tables[t + 1]
        spot_costs = problem.spot_step_costs
        od_cost = problem.on_demand_price * problem.step / 3600
        held, age = self._held(ctx, problem)
        options: list[tuple[float, int, RunningDecision]] = [(nxt[0, progress], 1, Wait(ctx.now + problem.step, "omniscient: idle"))]
        od_age = age if held == ("on-demand", None) else 0
        options.append((
            od_cost + nxt[states.on_demand(min(od_age + 1, problem.ages)), min(progress + problem.work(od_age), problem.goal)],
            0 if od_age else 2,
            Keep("omniscient: on-demand") if od_age else Launch(self.zones[0], "on-demand", "omniscient: on-demand"),
        ))
        for z, zone in enumerate(self.zones):
            if not problem.available[z, t]:
                continue
            z_age = age if held == ("spot", z) else 0
            value = spot_costs[z] + nxt[states.spot(z, min(z_age + 1, problem.ages)), min(progress + problem.work(z_age), problem.goal)]
            choice = Keep("omniscient: spot") if z_age else Launch(zone, "spot", "omniscient: spot")
            options.append((value, 0 if z_age else 2, choice))
        return min(options, key=lambda o: (round(o[0], 9), o[1]))[2]

    def _held(self, ctx: PlacementContext, problem: Problem) -> tuple[tuple[str, int | None] | None, int]:
        if ctx.current is None:
            return None, 0
        age = min(max(round((ctx.now - ctx.current.since) / problem.step), 1), problem.ages)
        if ctx.current.market == "on-demand":
            return ("on-demand", None), age
        return ("spot", self.zones.index(ctx.current.zone)), age


def _fallback(ctx: PlacementContext, reason: str) -> RunningDecision:
    if ctx.current is not None and ctx.current.market == "on-demand":
        return Keep(reason)
    return Launch(ctx.current.zone if ctx.current else ctx.zones[0], "on-demand", reason)
