"""How far the default policy's model of spot can go on the paper-model benchmark: a diagnostic, not a policy.

    .venv/bin/python benchmarks/policy_ceiling.py --processes 2              # starts every 12 h, ~5 min here
    .venv/bin/python benchmarks/policy_ceiling.py --processes 2 --every-hours 6

The default policy plans with a semi-Markov model of spot whose hazards it fits to the runs of spot (and gaps) it
has seen. Here the same policy code is run twice side by side: as it is, and with every fit replaced by a fit to
all the completed runs of the job's own trace, its future included, which no policy can know. Both run without and
with the market's history (all the trace before each start, `--market-history-hours inf` in `spotrun simulate`,
which also tells the policy the age of the run going on when the job starts). The second is the ceiling of this
model form: how much of the uniform_progress → omniscient gap the policy would close if its fit were perfect.

Prints a markdown table (docs/benchmarks.md, "Placement policies"). The policy is forked into the sweep's worker
processes with the whole-trace fit in place, so this needs the "fork" start method (Linux), else it runs in one
process.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time
from pathlib import Path

from spotrun.cli.simulate import load_markets
from spotrun.policy import deadline_aware
from spotrun.policy.observations import SpotLog
from spotrun.sim.engine import SimJob
from spotrun.sim.market import Market
from spotrun.sim.sweep import gap_closed, summarize, sweep
from spotrun.traces import shared_traces_dir

HOUR = 3600.0
SETTINGS = [(52.0, 0.1), (52.0, 0.2), (70.0, 0.1), (70.0, 0.2)]
REFERENCES = ["uniform_progress", "omniscient"]

_fit_as_kept = deadline_aware.estimate_hazards
_whole_traces: dict[str, SpotLog] = {}  # zone (= trace) name -> every step of its trace, once the ceiling is on


def _fit_to_whole_trace(log, zones, step, prior_mean_up, prior_mean_down, prior_runs):
    """estimate_hazards on the whole trace of the job's zone instead of what the job has seen."""
    return _fit_as_kept(_whole_traces[zones[0]], zones, step, prior_mean_up, prior_mean_down, prior_runs)


def whole_trace_log(name: str, market: Market) -> SpotLog:
    log = SpotLog()
    for t, up in enumerate(market.available[0].tolist()):
        log.record(name, t * market.gap_seconds, up)
    return log


def default_mean(markets, job: SimJob, every: float, history: float, processes: int | None, ceiling: bool) -> tuple:
    """default's mean normalized cost and misses, with the fit as kept or on the whole trace."""
    deadline_aware.estimate_hazards = _fit_to_whole_trace if ceiling else _fit_as_kept
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
    print("| D / d | uniform_progress | omniscient | as kept | whole-trace fit | as kept, market history "
          "| whole-trace fit, market history | misses |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    columns: list[list[float]] = [[], [], [], []]
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        refs = {s.policy: s for s in summarize(sweep(markets, REFERENCES, job, every_seconds=every,
                                                     processes=processes), REFERENCES)}
        up, best = refs["uniform_progress"].mean, refs["omniscient"].mean
        runs = [default_mean(markets, job, every, history, processes, ceiling)
                for history in (0.0, math.inf) for ceiling in (False, True)]
        cells = []
        for column, (mean, _) in zip(columns, runs):
            column.append(gap_closed(up, best, mean))
            cells.append(f"{mean:.4f} ({column[-1]:.1%})")
        misses = " / ".join(str(m) for m in [refs[r].misses for r in REFERENCES] + [m for _, m in runs])
        print(f"| {deadline:g} h / {overhead:g} h | {up:.4f} | {best:.4f} | {' | '.join(cells)} | {misses} |")
    means = " | ".join(f"{sum(c) / len(c):.1%}" for c in columns)
    print(f"| mean gap closed | | | {means} | |")
    print(f"\n{time.perf_counter() - began:.0f} s.")


if __name__ == "__main__":
    main()
