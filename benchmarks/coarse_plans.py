"""What the coarse plans of very long jobs give up, measured on jobs that can be planned finely too.

    .venv/bin/python benchmarks/coarse_plans.py [--every-hours 12] [--processes 2]

A job so long that its DP table would pass `DeadlineAwarePolicy.max_table_bytes` is planned coarser
(`DeadlineAwarePolicy.plan_grid`): its work is counted in whole steps first (a restart's overhead rounds up to
whole steps), and only then are the steps doubled (20 minutes, 40, ...). Such jobs are longer than the traces, so
here the benchmark's jobs (C = 48 h, D in {52, 70} h, d in {0.1, 0.2} h, every single-node trace alone, the paper's
model, the market's history before each start) are forced onto those grids and compared with default's own plans
of the same runs: mean normalized cost, the share of the uniform_progress -> omniscient gap closed, and misses.
Prints markdown.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

from spotrun import policy
from spotrun.cli.simulate import load_markets
from spotrun.policy import DeadlineAwarePolicy, DefaultPolicy
from spotrun.policy.deadline import DeadlineView
from spotrun.policy.placement import PlacementContext
from spotrun.sim.engine import SimJob
from spotrun.sim.sweep import summarize, sweep
from spotrun.traces import shared_traces_dir

HOUR = 3600.0
SETTINGS = [(52.0, 0.1), (52.0, 0.2), (70.0, 0.1), (70.0, 0.2)]


@dataclass(frozen=True)
class FixedGrid(DeadlineAwarePolicy):
    """The deadline-aware policy planning in `grid_step` steps with work counted in whole steps, as `plan_grid`
    plans a job whose finer tables would be too large."""

    grid_step: float = 600.0

    def plan_grid(self, ctx: PlacementContext, view: DeadlineView) -> tuple[float, float]:
        step = max(ctx.step if ctx.step is not None else 0.0, self.grid_step)
        return step, step


def coarse_default(grid_step: float):
    def factory(**options) -> DefaultPolicy:
        return DefaultPolicy(deadline_policy=FixedGrid(grid_step=grid_step), **options)

    return factory


GRIDS = {"default, work in whole 10-min steps": 600.0, "default, 20-min steps": 1200.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every-hours", type=float, default=12.0, help="hours between two start offsets")
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    markets = load_markets([shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"], multi_zone=False)
    coarse = {}
    for label, grid_step in GRIDS.items():
        name = f"default_grid_{grid_step:g}"
        policy._POLICIES[name] = coarse_default(grid_step)  # registered before the sweep's worker processes fork
        coarse[label] = name
    names = ["uniform_progress", "omniscient", "default", *coarse.values()]
    labels = ["default (its own plan)", *coarse]
    print(f"starts every {args.every_hours:g} h, the market's history before each start\n")
    print("| D / d | runs | " + " | ".join(labels) + " | misses | seconds |")
    print("| --- " * (len(labels) + 4) + "|")
    for deadline, overhead in SETTINGS:
        began = time.perf_counter()
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        records = sweep(markets, names, job, every_seconds=args.every_hours * HOUR, processes=args.processes,
                        history_seconds=math.inf)
        summary = {s.policy: s for s in summarize(records, names)}
        up, best = summary["uniform_progress"].mean, summary["omniscient"].mean
        cells = [f"{summary[n].mean:.4f} ({(up - summary[n].mean) / (up - best):.1%})" for n in names[2:]]
        misses = " / ".join(str(summary[n].misses) for n in names[2:])
        print(f"| {deadline:g} h / {overhead:g} h | {summary['default'].runs} | " + " | ".join(cells)
              + f" | {misses} | {time.perf_counter() - began:.0f} |")
    print("\nEach cell: mean normalized cost (share of the uniform_progress -> omniscient gap closed).")


if __name__ == "__main__":
    main()
