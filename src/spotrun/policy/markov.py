"""Expected cost to finish by the deadline when spot availability is a two-state Markov chain.

The chain is fitted to what has been seen of spot so far (mean run lengths of "available" and "not available",
censored runs included, starting from a weak prior), and the cheapest policy under it is found by dynamic
programming over steps left × work left × what the job holds × whether spot is available now — the omniscient
DP's model, with the future replaced by its expectation. A miss costs infinity, so a plan never takes a risk
on-demand could not cover: the deadline is kept whatever the chain does.

Tables depend only on (job shape, prices, quantized chain), so they are memoized: the policy stays a pure function
of its inputs while the simulator and the controller ask it every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from spotrun.policy.observations import SpotLog


GRID_PER_OCTAVE = 1


@dataclass(frozen=True)
class SpotModel:
    mean_up: float  # steps spot stays available, on average
    mean_down: float  # steps it stays away

    @property
    def stay_up(self) -> float:
        return _probability(1.0 - 1.0 / self.mean_up)

    @property
    def recover(self) -> float:
        return _probability(1.0 / self.mean_down)

    def quantized(self) -> SpotModel:
        """Means rounded to a grid of GRID_PER_OCTAVE points per doubling, so that tables are shared and rarely recomputed."""
        return SpotModel(_on_grid(self.mean_up), _on_grid(self.mean_down))


def _probability(p: float) -> float:
    """Never exactly 0 or 1: 0 × inf (a certain miss weighted by an impossible event) must stay 0, not NaN."""
    return min(max(p, 1e-9), 1.0 - 1e-9)


def _on_grid(mean: float) -> float:
    return float(2 ** (round(math.log2(min(max(mean, 1.0), 512.0)) * GRID_PER_OCTAVE) / GRID_PER_OCTAVE))


def fit_spot_model(
    log: SpotLog, zones: tuple[str, ...], now: float, step: float, prior: SpotModel, prior_runs: float
) -> SpotModel:
    """Maximum-likelihood geometric run lengths over every zone's observed runs, plus `prior_runs` prior runs."""
    up_steps, up_ends = prior.mean_up * prior_runs, prior_runs
    down_steps, down_ends = prior.mean_down * prior_runs, prior_runs
    for zone in zones:
        runs = log.zone(zone)
        up_steps += sum(runs.lifetimes) / step
        up_ends += len(runs.lifetimes)
        down_steps += sum(runs.gaps) / step
        down_ends += len(runs.gaps)
        if runs.available is not None:  # the run going on counts as time without an end (censored)
            ongoing = max(now - runs.since, 0.0) / step
            if runs.available:
                up_steps += ongoing
            else:
                down_steps += ongoing
    return SpotModel(max(up_steps / up_ends, 1.0), max(down_steps / down_ends, 1.0))


@dataclass(frozen=True)
class JobShape:
    """Everything but the chain that a table depends on, in whole steps and progress units."""

    steps: int  # steps from the job's start to its deadline
    goal: int  # progress units the job needs
    works: tuple[int, ...]  # units made in a step by an instance that already ran 0, 1, ..., A steps
    on_demand_cost: float  # per step
    spot_cost: float  # per step

    @property
    def ages(self) -> int:
        return len(self.works) - 1

    @classmethod
    def of(cls, step: float, compute: float, deadline_span: float, overhead: float, od_price: float, spot_price: float,
           unit: float) -> JobShape:
        ages = max(1, math.ceil(overhead / step - 1e-9))
        works = tuple(round((step - min(max(overhead - a * step, 0.0), step)) / unit) for a in range(ages + 1))
        return cls(
            steps=int(math.floor(deadline_span / step + 1e-9)),
            goal=math.ceil(compute / unit - 1e-9),
            works=works,
            on_demand_cost=od_price * step / 3600,
            spot_cost=spot_price * step / 3600,
        )


# Held-state rows of a table: 0 = nothing, 1..A = on-demand by age, A+1..2A = spot by age.
def on_demand_row(age: int) -> int:
    return age


def spot_row(age: int, ages: int) -> int:
    return ages + age


def _shifted_down(row: np.ndarray, by: int) -> np.ndarray:
    """out[..., w] = row[..., max(w - by, 0)]: the value after `by` units of work are done."""
    if by == 0:
        return row
    out = np.empty_like(row)
    out[..., by:] = row[..., :-by]
    out[..., :by] = row[..., :1]
    return out


@lru_cache(maxsize=32)
def value_table(shape: JobShape, model: SpotModel) -> np.ndarray:
    """V[k, spot_now, held, work_left]: least expected cost with k steps left (inf: the deadline could be missed).

    Stored as float32 (tables are large and only compared); computed in float64.
    """
    rows = 1 + 2 * shape.ages
    table = np.empty((shape.steps + 1, 2, rows, shape.goal + 1), dtype=np.float32)
    nxt = np.full((2, rows, shape.goal + 1), np.inf)
    nxt[:, :, 0] = 0.0
    table[0] = nxt
    stay_up, recover = model.stay_up, model.recover
    for k in range(1, shape.steps + 1):
        after = np.stack((recover * nxt[1] + (1 - recover) * nxt[0], stay_up * nxt[1] + (1 - stay_up) * nxt[0]))
        nxt = _step_values(after, shape)
        nxt[:, :, 0] = 0.0
        table[k] = nxt
    return table


def _step_values(after: np.ndarray, shape: JobShape) -> np.ndarray:
    """This step's values from the expected next-step values `after[spot_now, held_next, work_left]`."""
    ages, works = shape.ages, shape.works
    od, spot = shape.on_demand_cost, shape.spot_cost
    now = np.empty_like(after)
    idle = after[:, 0]
    od_start = od + _shifted_down(after[:, on_demand_row(1)], works[0])
    spot_start = spot + _shifted_down(after[1, spot_row(1, ages)], works[0])  # only when spot is up
    fresh = np.minimum(idle, od_start)  # best with nothing held (or a spot instance just preempted)
    fresh[1] = np.minimum(fresh[1], spot_start)
    now[:, 0] = fresh
    for age in range(1, ages + 1):
        later = min(age + 1, ages)
        od_keep = np.minimum(idle, od + _shifted_down(after[:, on_demand_row(later)], works[age]))
        od_keep[1] = np.minimum(od_keep[1], spot_start)
        now[:, on_demand_row(age)] = od_keep
        spot_keep = spot + _shifted_down(after[1, spot_row(later, ages)], works[age])
        now[1, spot_row(age, ages)] = np.minimum(np.minimum(idle[1], od_start[1]), spot_keep)
        now[0, spot_row(age, ages)] = fresh[0]
    return now


def option_values(
    table: np.ndarray, shape: JobShape, model: SpotModel, steps_left: int, work_left: int, held: str | None, age: int,
    spot_now: bool,
) -> dict[str, float]:
    """Expected cost of each choice for this step: "idle", "on-demand", "spot" (only when spot is up)."""
    nxt = table[steps_left - 1].astype(np.float64)
    p_up = model.stay_up if spot_now else model.recover
    ages, works = shape.ages, shape.works

    def expected(row: int, work: int) -> float:
        w = max(work_left - work, 0)
        return p_up * nxt[1, row, w] + (1 - p_up) * nxt[0, row, w]

    od_age = age if held == "on-demand" else 0
    values = {
        "idle": expected(0, 0),
        "on-demand": shape.on_demand_cost + expected(on_demand_row(min(od_age + 1, ages)), works[od_age]),
    }
    if spot_now:
        spot_age = age if held == "spot" else 0
        values["spot"] = shape.spot_cost + expected(spot_row(min(spot_age + 1, ages), ages), works[spot_age])
    return values
