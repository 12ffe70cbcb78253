"""How well the policy's spot model predicts, on data it was not fitted on: held-out log-loss of each step's
"does this run of spot (or this gap) end at the next step?".

    .venv/bin/python benchmarks/hazard_fit.py [--traces DIR] [--every-hours 12] [--history-days 14]

For each trace and each start (every 12 h, once 3 days of trace lie before it), the models are fitted on the 14 days
before the start, as the live controller's market history has them, and predict each step of the 70 h after it (a
52-70 h job's life). The log-loss of those predictions is summed per trace. Models:

- ``spotrun``: the policy's own model (`run_ages.estimate_hazards`, the bucket hazards its DP plans with);
- ``ages to 17+``: the same hazard form with the ages of before: buckets up to 17+ steps, likelihood ages to 24;
- ``logistic ...``: logistic regressions of "ends at the next step" on the age terms (1 / (age + 1), log(age + 1))
  alone, and with one more kind of covariate: the 6-hour block of the day, the previous runs' lengths, or churn
  (runs of spot lost in the 6 h before, spot's share of the day before). They ask whether anything beyond age
  predicts spot (docs/benchmarks.md, "Fifth round"). scikit-learn is installed by `make install`.
- ``logistic, age + sibling markets`` / ``+ all markets``: the same with what other markets of the folder (measured
  at the same times) show at the step: whether spot is there in the two siblings (the other size of the same GPU in
  the same zone, the same instance type in the other zone), or in every other trace. A controller knows that only
  where it holds or tries instances there, so these ask how much such signals would be worth ("Eighth round").

Prints one markdown row per trace: the steps predicted and each model's log-loss relative to spotrun's (negative:
better than spotrun's).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression

from spotrun.policy import DeadlineAwarePolicy, SpotLog
from spotrun.policy.run_ages import AGE_BUCKETS, bucket_hazards, estimate_hazards, fitted_form
from spotrun.traces import load_trace, shared_traces_dir

STEP = 600.0
HORIZON_STEPS = 420  # 70 h
FIRST_START = 432  # 3 days
BLOCK_STEPS = 36  # 6 h
OLD_BUCKETS, OLD_COUNTED_AGES = (1, 2, 3, 5, 9, 17), 24
COVARIATES = ("block of day", "previous runs", "churn", "sibling markets", "all markets")


@dataclass(frozen=True)
class Steps:
    """Per step t of a trace (but the last): spot's state, the age of its run, whether the run ends at t + 1, and the
    covariates."""

    up: np.ndarray
    age: np.ndarray
    ends: np.ndarray
    block: np.ndarray
    previous_up: np.ndarray  # length of the last completed run of spot before t's run (0: none)
    previous_down: np.ndarray
    lost_6h: np.ndarray  # runs of spot that ended in the 36 steps up to t
    share_1d: np.ndarray  # spot's share of the 144 steps up to t
    siblings: np.ndarray  # (steps, 2): spot in the other size of the same GPU and zone, and in the other zone
    others: np.ndarray  # (steps, traces - 1): spot in every other trace of the folder

    @classmethod
    def of(cls, data: np.ndarray, siblings: np.ndarray, others: np.ndarray) -> Steps:
        up = data.astype(bool)
        n = len(up) - 1
        age, previous_up, previous_down = np.zeros(n), np.zeros(n), np.zeros(n)
        run_start, last = 0, {True: 0, False: 0}
        for t in range(n):
            if t > 0 and up[t] != up[t - 1]:
                last[bool(up[t - 1])] = t - run_start
                run_start = t
            age[t], previous_up[t], previous_down[t] = t - run_start + 1, last[True], last[False]
        lost = np.concatenate([[0], np.cumsum(up[:-1] & ~up[1:])])  # lost[t]: runs of spot gone by step t
        shown = np.concatenate([[0], np.cumsum(up)])
        steps = np.arange(n)
        return cls(
            up=up[:n], age=age, ends=(up[1:] != up[:-1]).astype(float), block=(steps // BLOCK_STEPS) % 4,
            previous_up=previous_up, previous_down=previous_down,
            lost_6h=lost[steps] - lost[np.maximum(steps - 36, 0)],  # not lost[t + 1]: that is the outcome itself
            share_1d=(shown[steps + 1] - shown[np.maximum(steps - 143, 0)]) / np.minimum(steps + 1, 144),
            siblings=siblings[:n], others=others[:n],
        )

    def features(self, rows: np.ndarray, covariate: str | None) -> np.ndarray:
        age = self.age[rows]
        columns = [1.0 / (age + 1.0), np.log(age + 1.0)]
        if covariate == "block of day":
            columns += [self.block[rows] == b for b in (1, 2, 3)]
        elif covariate == "previous runs":
            columns += [np.log1p(self.previous_up[rows]), np.log1p(self.previous_down[rows])]
        elif covariate == "churn":
            columns += [np.log1p(self.lost_6h[rows]), self.share_1d[rows]]
        elif covariate == "sibling markets":
            columns += list(self.siblings[rows].T)
        elif covariate == "all markets":
            columns += list(self.others[rows].T)
        return np.column_stack(columns).astype(float)


def old_ages_hazards(completed: list[int], prior_mean: float, prior_runs: float) -> tuple[float, ...]:
    """The policy's fit and bucket hazards with the ages of before (buckets to 17+, likelihood ages to 24)."""
    form = fitted_form(completed, prior_mean, prior_runs, counted_ages=OLD_COUNTED_AGES)
    return bucket_hazards(form.base, form.shape, OLD_BUCKETS, float(OLD_COUNTED_AGES))


def _log_loss(chance: np.ndarray, ends: np.ndarray) -> float:
    chance = np.clip(chance, 1e-4, 1 - 1e-4)
    return float(-np.sum(ends * np.log(chance) + (1 - ends) * np.log1p(-chance)))


def _bucket_chance(hazards: tuple[float, ...], age: np.ndarray, buckets: tuple[int, ...]) -> np.ndarray:
    index = np.searchsorted(np.array(buckets), age, side="right") - 1
    return np.array(hazards)[np.minimum(index, len(hazards) - 1)]


def trace_losses(steps: Steps, every: int, history: int) -> tuple[int, dict[str, float]]:
    data, policy = steps.up, DeadlineAwarePolicy()
    prior_up, prior_down = policy.prior_mean_up / STEP, policy.prior_mean_down / STEP
    losses: dict[str, float] = {}
    predicted = 0
    for start in range(FIRST_START, len(data) + 1 - HORIZON_STEPS, every):
        first = max(start - history, 0)
        log = SpotLog()
        for t in range(first, start):
            log.record("z", t * STEP, bool(data[t]))
        ours = estimate_hazards(log, ("z",), STEP, prior_up, prior_down, policy.prior_runs)
        runs = log.zone("z")
        completed = {True: [round(s / STEP) for s in runs.lifetimes], False: [round(s / STEP) for s in runs.gaps]}
        fitted_on = np.arange(first, start - 1)  # steps whose outcome (step + 1) lies before the start
        tested = np.arange(start, start + HORIZON_STEPS)
        for up, prior in ((True, prior_up), (False, prior_down)):
            rows = tested[steps.up[tested] == up]
            if len(rows) == 0:
                continue
            predicted += len(rows)
            ends, age = steps.ends[rows], steps.age[rows]
            old = old_ages_hazards(completed[up], prior, policy.prior_runs)
            chances = {
                "spotrun": _bucket_chance(ours.up if up else ours.down, age, AGE_BUCKETS),
                "ages to 17+": _bucket_chance(old, age, OLD_BUCKETS),
            }
            train = fitted_on[steps.up[fitted_on] == up]
            if steps.ends[train].sum() >= 3:  # a logistic fit needs some ends to learn from
                for covariate in (None, *COVARIATES):
                    name = f"logistic, age{' + ' + covariate if covariate else ''}"
                    chances[name] = _logistic(steps, train, rows, covariate)
            for name, chance in chances.items():
                losses[name] = losses.get(name, 0.0) + _log_loss(chance, ends)
    return predicted, losses


def _logistic(steps: Steps, train: np.ndarray, rows: np.ndarray, covariate: str | None) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on tiny fits
        model = LogisticRegression(max_iter=500).fit(steps.features(train, covariate), steps.ends[train])
    return model.predict_proba(steps.features(rows, covariate))[:, 1]


def window_arguments(description: str) -> tuple[Path, int, int]:
    """From the command line (this script's and hazard_recency.py's): the folder of traces, and the steps between
    two starts and of history before each."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--traces", type=Path, default=None, help="folder of 1-node traces")
    parser.add_argument("--every-hours", type=float, default=12.0)
    parser.add_argument("--history-days", type=float, default=14.0)
    args = parser.parse_args()
    folder = args.traces or shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    return folder, round(args.every_hours * 3600 / STEP), round(args.history_days * 86400 / STEP)


def main() -> None:
    folder, every, history = window_arguments(__doc__.splitlines()[0])
    began = time.perf_counter()
    models = ["ages to 17+", "logistic, age", *(f"logistic, age + {c}" for c in COVARIATES)]
    print("| trace | steps predicted | spotrun's log-loss | " + " | ".join(models) + " |")
    print("| --- | --- | --- |" + " --- |" * len(models))
    totals: dict[str, float] = {}
    traces = load_traces(folder)
    for name, data in traces.items():
        others = [other for other in traces if other != name]
        steps = Steps.of(data, _stacked(traces, sibling_names(name, others)), _stacked(traces, others))
        predicted, losses = trace_losses(steps, every, history)
        for model, loss in losses.items():
            totals[model] = totals.get(model, 0.0) + loss
        print(f"| {name} | {predicted} | {losses.get('spotrun', math.nan):.0f} | "
              + " | ".join(_relative(losses, model) for model in models) + " |")
    print(f"| all | | {totals.get('spotrun', math.nan):.0f} | "
          + " | ".join(_relative(totals, model) for model in models) + " |")
    print(f"\n{time.perf_counter() - began:.0f} s")


def load_traces(folder: Path, same_length: bool = True) -> dict[str, np.ndarray]:
    """Every trace of the folder by name, as booleans (spot there: at least one instance). Traces sampled finer than
    600 s in whole divisions of it (the 300 s traces of 2023) are read at every 600 s (their first sample of each).
    `same_length`: refuse traces of different lengths (the market covariates need them measured together)."""
    traces = {}
    for path in sorted(folder.glob("*.json")):
        trace = load_trace(path)
        every = STEP / trace.gap_seconds
        if every < 1 or abs(every - round(every)) > 1e-9:
            raise SystemExit(f"{path}: steps of {trace.gap_seconds} s; this benchmark reads 600 s traces, or traces "
                             "whose step divides 600 s")
        traces[path.stem] = np.asarray(trace.data)[:: round(every)] > 0
    if same_length and len({len(data) for data in traces.values()}) > 1:
        raise SystemExit(f"{folder}: traces of different lengths; the market covariates need them measured together")
    return traces


def sibling_names(name: str, others: list[str]) -> list[str]:
    """For ZONE_GPU_COUNT: the other count of the same GPU in the same zone, and the same GPU and count elsewhere."""
    zone, gpu, count = name.rsplit("_", 2)
    return [o for o in others if o.rsplit("_", 2)[1] == gpu and (o.startswith(zone + "_") != o.endswith("_" + count))]


def _stacked(traces: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    length = len(next(iter(traces.values())))
    return np.column_stack([traces[n] for n in names]).astype(float) if names else np.zeros((length, 0))


def _relative(losses: dict[str, float], name: str) -> str:
    if name not in losses or not losses.get("spotrun"):
        return "-"
    return f"{100 * (losses[name] / losses['spotrun'] - 1):+.1f}%"


if __name__ == "__main__":
    main()
