"""How the chance that spot changes depends on how long its current run has lasted, learned online.

Spot runs are heavy-tailed: a run of availability that just began usually dies within a step or two while one that
lasted hours tends to go on, and a fresh gap usually closes soon while an old one tends to stay. The hazard of a run
(the chance it ends at the next step) at age a is modelled as shape / (a + 1) + base: a part that falls with age
and a part that does not, both fitted per kind of run ("available" / "not available") by maximum likelihood over
the completed runs seen, plus `prior_runs` geometric prior runs, on grids (SHAPE_GRID × BASE_GRID).

Why so few free parameters: every distinct model costs a DP table (~0.3 s), and the fit is asked every step. A
free hazard per age bucket (tried first) moved at almost every step — some 40 tables per job. The shape is fitted
only once MIN_RUNS_FOR_SHAPE completed runs are known (in practice: from the market's history, which the platform
keeps across jobs; a job alone rarely sees that many); before that it is SHAPE, a prior of form: the median of the
16 maximum-likelihood fits (up and down runs of each of the 8 AWS traces of docs/benchmarks.md, each whole trace
alone; they range over 0.375-1.5; leaving any one trace out, the median is 0.5 for seven traces and 0.625 for
us-west-2b_k80_1). Fitted from a handful of runs the shape only adds noise (measured: docs/benchmarks.md).

The DP's chain (`markov`) holds the age in AGE_BUCKETS, moving to the next bucket at the rate 1 / width. The buckets
double up to 129+ steps (~21 h) and the likelihood counts ages up to 256 because some markets have runs of days: a
gap that has lasted 40 h is far less likely to close in the next step than one of 3 h, and a model whose ages stop at
a few hours (17+, counted to 24, as before) cannot say so. On held-out data (each 70 h after a start, fitted on the
14 days before: benchmarks/hazard_fit.py) that cut the log-loss of us-west-2b_k80_1's runs, mostly gaps of days, by
23%, and moved the other traces' by -1.3% to +0.4%.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np

from spotrun.policy.observations import SpotLog

AGE_BUCKETS: tuple[int, ...] = (1, 2, 3, 5, 9, 17, 33, 65, 129)  # first age of each bucket; the last is open-ended
SHAPE = 0.5  # the hazard's age-dependent part, shape / (age + 1), until the runs can tell: see the module's doc
SHAPE_GRID = (0.25, 0.5, 1.0)  # octaves around SHAPE, spanning the per-trace fits
MIN_RUNS_FOR_SHAPE = 50  # completed runs (prior runs not counted) before the shape is fitted rather than assumed
BASE_GRID = tuple(2.0**-k for k in range(1, 10))  # the age-independent part, fitted on a grid so tables are shared
MAX_HAZARD = 0.95
COUNTED_AGES = 256  # the likelihood counts exact ages up to this; older ones pool there
TAIL_AGE = 1.5 * (AGE_BUCKETS[-1] - 1)  # the age standing for the open-ended bucket (129+: 192, mid-octave)


def bucket_of(age: int) -> int:
    """The bucket holding a run that has lasted `age` steps (age 1: seen in this state for the first time now)."""
    return max(bisect_right(AGE_BUCKETS, age) - 1, 0)


def bucket_width(bucket: int, buckets: int = len(AGE_BUCKETS)) -> float:
    """How many ages the bucket spans (inf for the last of `buckets`)."""
    if bucket + 1 >= buckets:
        return math.inf
    return float(AGE_BUCKETS[bucket + 1] - AGE_BUCKETS[bucket])


@dataclass(frozen=True)
class RunHazards:
    """Per age bucket, the chance that a run of "available" (up) or "not available" (down) ends at the next step."""

    up: tuple[float, ...]
    down: tuple[float, ...]

    def mean_run(self, available: bool) -> float:
        """Expected length of a fresh run, in steps (for explanations)."""
        return _mean_run(self.up if available else self.down)


@lru_cache(maxsize=1024)
def _mean_run(hazards: tuple[float, ...]) -> float:
    alive, mean = 1.0, 0.0
    for bucket, hazard in enumerate(hazards):
        width = bucket_width(bucket, len(hazards))
        if math.isinf(width):
            return mean + alive / hazard
        for _ in range(int(width)):
            mean += alive
            alive *= 1.0 - hazard
    return mean


@dataclass(frozen=True)
class HazardForm:
    """The hazard shape / (age + 1) + base of one kind of run."""

    shape: float
    base: float

    def at(self, age: float) -> float:
        return shaped_hazard(age, self.base, self.shape)


def shaped_hazard(age: float, base: float, shape: float = SHAPE) -> float:
    """The hazard at `age` of runs whose hazard falls from shape / 2 + base toward `base` as they age."""
    return min(shape / (age + 1.0) + base, MAX_HAZARD)


def bucket_hazards(
    base: float, shape: float = SHAPE, buckets: tuple[int, ...] = AGE_BUCKETS, tail_age: float = TAIL_AGE,
) -> tuple[float, ...]:
    """Per bucket (first ages `buckets`), the mean shaped hazard over its ages (the open-ended last: at `tail_age`).
    Other buckets than AGE_BUCKETS are for comparing age layouts (benchmarks/hazard_fit.py)."""
    bounds = (*buckets, None)
    hazards = []
    for first, stop in zip(bounds, bounds[1:]):
        ages = [tail_age] if stop is None else range(first, stop)
        hazards.append(sum(shaped_hazard(a, base, shape) for a in ages) / len(ages))
    return tuple(hazards)


def age_counts(
    completed: Iterable[int], counted_ages: int = COUNTED_AGES, weights: Iterable[float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(exposure, ends) per exact age 1..counted_ages, the last age standing for all older ones.

    A run of L steps was at risk of ending at ages 1..L and ended at age L. `weights` (one per run, default 1) are
    for comparing weighted fits (benchmarks/hazard_recency.py); the policy counts every run once.
    """
    lengths = np.maximum(np.fromiter(completed, dtype=np.int64), 1)
    weight = np.ones(len(lengths)) if weights is None else np.fromiter(weights, dtype=float)
    if len(weight) != len(lengths):
        raise ValueError(f"{len(weight)} weights for {len(lengths)} runs")
    ends = np.bincount(np.minimum(lengths, counted_ages) - 1, weights=weight, minlength=counted_ages)
    exposure = np.cumsum(ends[::-1])[::-1]  # a run is at risk at every age up to the one it ended at
    exposure[-1] += weight @ np.maximum(lengths - counted_ages, 0)
    return exposure, ends


def _prior_counts(mean: float, runs: float, ages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`runs` runs of geometric length with `mean` steps, in expectation."""
    end = 1.0 / max(mean, 1.0)
    alive = runs * (1.0 - end) ** (ages - 1)
    exposure = alive.copy()
    exposure[-1] += alive[-1] * (1.0 - end) / end  # the expected steps beyond the last counted age
    ends = alive * end
    ends[-1] = alive[-1]
    return exposure, ends


def fitted_form(
    completed: Sequence[int], prior_mean: float, prior_runs: float, counted_ages: int = COUNTED_AGES,
    weights: Sequence[float] | None = None,
) -> HazardForm:
    """The hazard form on the grids that makes the completed runs (plus the prior runs) likeliest: the base on
    BASE_GRID, and the shape on SHAPE_GRID once MIN_RUNS_FOR_SHAPE runs are known (SHAPE before). The likelihood
    counts ages up to `counted_ages` and each run with its weight (other values only to compare, as
    benchmarks/hazard_fit.py and hazard_recency.py do)."""
    ages, log_hazard, log_survival = _form_tables(counted_ages)
    exposure, ends = age_counts(completed, counted_ages, weights)
    prior_exposure, prior_ends = _prior_counts(prior_mean, prior_runs, ages)
    exposure, ends = exposure + prior_exposure, ends + prior_ends
    log_likelihood = log_hazard @ ends + log_survival @ (exposure - ends)
    if len(completed) < MIN_RUNS_FOR_SHAPE:
        log_likelihood = np.where(_FORMS_OF_SHAPE, log_likelihood, -np.inf)
    return _FORMS[int(np.argmax(log_likelihood))]


def estimate_hazards(
    log: SpotLog, zones: tuple[str, ...], step: float, prior_mean_up: float, prior_mean_down: float,
    prior_runs: float,
) -> RunHazards:
    """Bucket hazards of "available" and "not available" runs fitted to every zone's completed runs.

    Only completed runs count: the run going on would move the fit at every step, and every move costs a new table.
    """
    per_zone = [log.zone(zone).completed_in_steps(step) for zone in zones]
    ups, downs = _joined([lives for lives, _ in per_zone]), _joined([gaps for _, gaps in per_zone])
    return _hazards_of(_fitted_form_of(ups, prior_mean_up, prior_runs), _fitted_form_of(downs, prior_mean_down, prior_runs))


def _joined(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The zones' runs as one tuple; one zone's is passed on as it is (no copy each step)."""
    return parts[0] if len(parts) == 1 else tuple(chain.from_iterable(parts))


@lru_cache(maxsize=4096)
def _fitted_form_of(completed: tuple[int, ...], prior_mean: float, prior_runs: float) -> HazardForm:
    """fitted_form, remembered: the completed runs change only when a run ends, and the policy asks every step."""
    return fitted_form(completed, prior_mean, prior_runs)


@lru_cache(maxsize=None)
def _hazards_of(up: HazardForm, down: HazardForm) -> RunHazards:
    return RunHazards(bucket_hazards(up.base, up.shape), bucket_hazards(down.base, down.shape))


def current_age(since: float, now: float, step: float) -> int:
    """Steps a run first seen at `since` has lasted by `now`, counting the step now (>= 1)."""
    return max(round((now - since) / step), 0) + 1


_FORMS = tuple(HazardForm(shape, base) for shape in SHAPE_GRID for base in BASE_GRID)
_FORMS_OF_SHAPE = np.array([form.shape == SHAPE for form in _FORMS])  # the forms allowed before the shape is fitted


@lru_cache(maxsize=4)
def _form_tables(counted_ages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ages 1..counted_ages, and every form's log hazard and log survival at each of them."""
    ages = np.arange(1, counted_ages + 1, dtype=float)
    hazard = np.array([[form.at(a) for a in ages] for form in _FORMS])
    return ages, np.log(hazard), np.log1p(-hazard)
