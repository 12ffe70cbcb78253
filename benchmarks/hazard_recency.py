"""Would the policy's spot model forecast better if it weighed recent runs more? Held-out log-loss, refitted online.

    .venv/bin/python benchmarks/hazard_recency.py [--traces DIR] [--every-hours 12] [--history-days 14]

benchmarks/hazard_fit.py fits once, at a job's start. The policy refits while the job runs: each step its hazards
come from the completed runs known then, the market's history before the start and the runs of the job's own window
that have ended since. Whether the window's own runs should count for more (the market drifting from week to week)
is what this measures: for each trace and each start (every 12 h, once 3 days of trace lie before it), each step of
the 70 h after the start is predicted with the policy's hazard form (`run_ages.fitted_form`, its grids, prior and
buckets) fitted on the runs known at that step, under each weighting:

- ``equal``: every run once (the policy as kept);
- ``frozen``: fitted at the start and never again (what hazard_fit.py scores);
- ``decay N d``: a run that ended s before the step weighs exp(-s / N days);
- ``history as N runs``: the runs before the start weigh N / their number when they are more (the window's count once);
- ``history at half weight``;
- ``no history``: only the runs that ended after the start (the run going on at the start counted whole), as the
  policy without the market's history fits;
- ``chosen on the day before``: at each start, whichever of ``equal`` and ``no history`` forecast the day before
  the start better (each refitted online through that day, the way it would have forecast it), for the whole window.
  Does the market's own record say when its history misleads?

Prints per weighting the summed log-loss of "does this run (of spot, or this gap) end at the next step?", and its
change against ``equal`` in all and per trace (negative: better than the policy's weighting).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from hazard_fit import FIRST_START, HORIZON_STEPS, STEP, _bucket_chance, _log_loss, load_traces, window_arguments
from spotrun.policy import DeadlineAwarePolicy
from spotrun.policy.run_ages import AGE_BUCKETS, bucket_hazards, fitted_form

DAY = 144  # steps
Run = tuple[bool, int, int]  # kind (spot up), first step, steps
# weights of the completed runs known at step `now` of a job that started at `start`, from the steps they ended at
Weighting = Callable[[np.ndarray, int, int], np.ndarray]
EQUAL: Weighting = lambda ended, now, start: np.ones(len(ended))  # noqa: E731  (every run once: the policy's)
CHOSEN = "chosen on the day before"


def weightings() -> dict[str, Weighting]:
    named: dict[str, Weighting] = {"equal": EQUAL}
    for days in (1, 2, 4, 7):
        named[f"decay {days} d"] = lambda ended, now, start, tau=days * DAY: np.exp(-(now - ended) / tau)
    for runs in (20, 50, 100):
        named[f"history as {runs} runs"] = lambda ended, now, start, n=runs: _history_weighed(ended, start, n)
    named["history at half weight"] = lambda ended, now, start: np.where(ended <= start, 0.5, 1.0)
    return named


def _history_weighed(ended: np.ndarray, start: int, runs: int) -> np.ndarray:
    before = ended <= start
    weights = np.ones(len(ended))
    if before.sum() > runs:
        weights[before] = runs / before.sum()
    return weights


def completed_runs(up: np.ndarray, first: int, stop: int) -> list[Run]:
    """The runs of up[first:stop] that ended before `stop`, the first one counted from `first` (where the record
    begins, as a spot log that starts there has it)."""
    runs, began = [], first
    for t in range(first + 1, stop):
        if up[t] != up[t - 1]:
            runs.append((bool(up[t - 1]), began, t - began))
            began = t
    return runs


def ages_of(up: np.ndarray) -> np.ndarray:
    """Per step, how many steps its run has lasted (1: it began at this step)."""
    age = np.ones(len(up))
    for t in range(1, len(up)):
        age[t] = age[t - 1] + 1 if up[t] == up[t - 1] else 1
    return age


def window_loss(
    up: np.ndarray, age: np.ndarray, runs: list[Run], start: int, weigh: Weighting | None, priors: dict[bool, float],
    prior_runs: float, horizon: int = HORIZON_STEPS,
) -> float:
    """Summed log-loss over the `horizon` steps from `start`; `weigh` None: the fit at the start, frozen."""
    ended = {kind: np.array([f + n for k, f, n in runs if k == kind], dtype=float) for kind in (True, False)}
    lengths = {kind: [n for k, _, n in runs if k == kind] for kind in (True, False)}
    every_step = weigh is not None and not _moves_only_with_runs(weigh)
    fits: dict[tuple, tuple[float, ...]] = {}
    loss = 0.0
    for now in range(start, start + horizon):
        kind = bool(up[now])
        known = int(np.searchsorted(ended[kind], start if weigh is None else now, side="right"))
        key = (kind, known, now if every_step else None)
        if key not in fits:
            weights = None if weigh is None else weigh(ended[kind][:known], now, start)
            form = fitted_form(lengths[kind][:known], priors[kind], prior_runs, weights=weights)
            fits[key] = bucket_hazards(form.base, form.shape)
        chance = _bucket_chance(fits[key], age[now : now + 1], AGE_BUCKETS)
        loss += _log_loss(chance, np.array([float(up[now + 1] != up[now])]))
    return loss


def _moves_only_with_runs(weigh: Weighting) -> bool:
    """Whether the weights change only when a run ends (not with the step itself), so fits can be kept meanwhile."""
    ended = np.array([1.0, 5.0])
    return bool(np.array_equal(weigh(ended, 10, 3), weigh(ended, 20, 3)))


def trace_losses(up: np.ndarray, every: int, history: int) -> dict[str, float]:
    policy = DeadlineAwarePolicy()
    priors = {True: policy.prior_mean_up / STEP, False: policy.prior_mean_down / STEP}
    age = ages_of(up)
    named: dict[str, Weighting | None] = {"frozen": None, **weightings()}
    losses = dict.fromkeys([*named, "no history", CHOSEN], 0.0)
    for start in range(FIRST_START, len(up) - HORIZON_STEPS, every):
        runs = completed_runs(up, max(start - history, 0), start + HORIZON_STEPS)
        window = {name: window_loss(up, age, runs, start, weigh, priors, policy.prior_runs)
                  for name, weigh in named.items()}
        window["no history"] = window_loss(up, age, _ended_after(runs, start), start, EQUAL, priors, policy.prior_runs)
        window[CHOSEN] = window[_better_the_day_before(up, age, start, history, priors, policy.prior_runs)]
        for name, loss in window.items():
            losses[name] += loss
    return losses


def _ended_after(runs: list[Run], start: int) -> list[Run]:
    return [run for run in runs if run[1] + run[2] > start]


def _better_the_day_before(
    up: np.ndarray, age: np.ndarray, start: int, history: int, priors: dict[bool, float], prior_runs: float,
) -> str:
    """"equal" or "no history": which forecast the day before `start` better, as if that day were a job's window."""
    day_start = start - DAY
    runs = completed_runs(up, max(day_start - history, 0), start)
    with_history = window_loss(up, age, runs, day_start, EQUAL, priors, prior_runs, horizon=DAY)
    without = window_loss(up, age, _ended_after(runs, day_start), day_start, EQUAL, priors, prior_runs, horizon=DAY)
    return "equal" if with_history <= without else "no history"


def main() -> None:
    folder, every, history = window_arguments(__doc__.splitlines()[0])
    began = time.perf_counter()
    per_trace = {name: trace_losses(data, every, history) for name, data in load_traces(folder, same_length=False).items()}
    if not per_trace:
        raise SystemExit(f"{folder}: no *.json traces")
    print("| weighting | log-loss | against equal | " + " | ".join(per_trace) + " |")
    print("| --- | --- | --- |" + " --- |" * len(per_trace))
    for weighting in next(iter(per_trace.values())):
        total = sum(losses[weighting] for losses in per_trace.values())
        equal = sum(losses["equal"] for losses in per_trace.values())
        cells = [_relative(losses[weighting], losses["equal"]) for losses in per_trace.values()]
        print(f"| {weighting} | {total:.0f} | {_relative(total, equal)} | " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - began:.0f} s")


def _relative(loss: float, equal: float) -> str:
    return f"{100 * (loss / equal - 1):+.1f}%" if equal > 0 and math.isfinite(loss) else "-"


if __name__ == "__main__":
    main()
