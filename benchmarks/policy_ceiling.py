"""How far the default policy's model of spot can go on the paper-model benchmark: a diagnostic, not a policy.

    .venv/bin/python benchmarks/policy_ceiling.py --processes 2              # starts every 12 h, ~5 min here
    .venv/bin/python benchmarks/policy_ceiling.py --processes 2 --every-hours 6

The default policy plans with a semi-Markov model of spot whose hazards it fits to the runs of spot (and gaps) it
has seen. Here the same policy code is run three times side by side: as it is; with every fit replaced by a fit of
its form (shape / (age + 1) + base) to all the completed runs of the job's own trace, its future included, which no
policy can know; and with free hazards, one per age bucket, counted on that whole trace. All run without and with
the market's history (all the trace before each start, `--market-history-hours inf` in `spotrun simulate`, which
also tells the policy the age of the run going on when the job starts). The second is the ceiling of the policy's
model form, the third that of its chain with any hazards: how much of the uniform_progress → omniscient gap the
policy would close if it knew the trace's hazards.

Prints a markdown table (docs/benchmarks.md, "Placement policies"). The policy is forked into the sweep's worker
processes with the whole-trace fit in place, so this needs the "fork" start method (Linux), else it runs in one
process.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from functools import lru_cache
from pathlib import Path

from spotrun.cli.simulate import load_markets
from spotrun.policy import deadline_aware
from spotrun.policy.observations import SpotLog
from spotrun.policy.run_ages import AGE_BUCKETS, RunHazards, age_counts
from spotrun.sim.engine import SimJob
from spotrun.sim.market import Market
from spotrun.sim.sweep import summarize, sweep
from spotrun.traces import shared_traces_dir
from variant_table import print_variant_table

HOUR = 3600.0

_fit_as_kept = deadline_aware.estimate_hazards
_whole_traces: dict[str, SpotLog] = {}  # zone (= trace) name -> every step of its trace, once the ceiling is on


def _fit_to_whole_trace(log, zones, step, prior_mean_up, prior_mean_down, prior_runs):
    """estimate_hazards on the whole trace of the job's zone instead of what the job has seen."""
    return _fit_as_kept(_whole_traces[zones[0]], zones, step, prior_mean_up, prior_mean_down, prior_runs)


def _counted_on_whole_trace(log, zones, step, *priors):
    """Each age bucket's hazard counted on the whole trace of the job's zone: its runs' ends over their steps."""
    return _whole_trace_buckets(zones[0], step)


@lru_cache(maxsize=None)
def _whole_trace_buckets(zone: str, step: float) -> RunHazards:
    runs = _whole_traces[zone].zone(zone)
    return RunHazards(bucket_rates(runs.lifetimes, step), bucket_rates(runs.gaps, step))


def bucket_rates(lengths, step: float) -> tuple[float, ...]:
    """Per age bucket, the runs that ended in it over the steps runs spent in it (half a run over one step added, so
    that a bucket no run reached has a hazard of 0.5, not 0/0), within (1e-4, 0.95) as the chain's hazards are."""
    counted = max([round(length / step) for length in lengths] + [AGE_BUCKETS[-1]])
    exposure, ends = age_counts([round(length / step) for length in lengths], counted)
    bounds = (*AGE_BUCKETS, counted + 1)
    return tuple(
        min(max((ends[first - 1 : stop - 1].sum() + 0.5) / (exposure[first - 1 : stop - 1].sum() + 1.0), 1e-4), 0.95)
        for first, stop in zip(bounds, bounds[1:])
    )


VARIANTS = {
    "as kept": _fit_as_kept, "whole-trace fit": _fit_to_whole_trace, "whole-trace buckets": _counted_on_whole_trace,
}


def whole_trace_log(name: str, market: Market) -> SpotLog:
    log = SpotLog()
    for t, up in enumerate(market.available[0].tolist()):
        log.record(name, t * market.gap_seconds, up)
    return log


def default_mean(markets, job: SimJob, every: float, history: float, processes: int | None, variant: str) -> tuple:
    """default's mean normalized cost and misses, with its hazards as the variant has them."""
    deadline_aware.estimate_hazards = VARIANTS[variant]
    try:
        records = sweep(markets, ["default"], job, every_seconds=every, processes=processes, history_seconds=history)
    finally:
        deadline_aware.estimate_hazards = _fit_as_kept
    summary = summarize(records, ["default"])[0]
    return summary.mean, summary.misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=None, help="folder of 1-node traces")
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--every-hours", type=float, default=12.0, help="hours between two start offsets (default 12)")
    args = parser.parse_args()
    processes = args.processes if multiprocessing.get_start_method() == "fork" else 1
    folder = args.traces or shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    markets = load_markets([folder], multi_zone=False)
    _whole_traces.update({name: whole_trace_log(name, market) for name, market in markets})
    every = args.every_hours * HOUR
    began = time.perf_counter()
    print(f"{len(markets)} traces from {folder.name}; C = 48 h, starts every {args.every_hours:g} h. Gap closed by "
          "default between uniform_progress and omniscient:\n")

    def run_variant(job: SimJob, history: float, variant: str) -> tuple[float, int]:
        return default_mean(markets, job, every, history, processes, variant)

    print_variant_table(markets, list(VARIANTS), run_variant, every, processes)
    print(f"\n{time.perf_counter() - began:.0f} s.")


if __name__ == "__main__":
    main()
