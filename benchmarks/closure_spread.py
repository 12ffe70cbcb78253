"""How far the benchmark's "share of the gap closed" moves with choices it could equally have made: the traces it
happens to hold, the start offsets it happens to draw, and where its grid of starts begins.

    .venv/bin/python benchmarks/closure_spread.py --processes 2                 # 2022 traces, the benchmark's
    .venv/bin/python benchmarks/closure_spread.py --processes 2 --traces /work/shared/traces/availability/16-node/aws-08-27-2023

Issue 4's target is that default closes at least half of the uniform_progress → omniscient gap, averaged over the
four settings, from starts every 6 h. This runs every policy it needs from starts every `--every-hours` / 2 (3 h),
so that it holds two 6-hour grids, the benchmark's (starts at 0, 6, 12 h, ...) and the one shifted by half a
period (3, 9, 15 h, ...), and reports for default, without and with the market's history:

- the gap closed on each grid;
- a bootstrap over traces (each resample draws as many traces as there are, with replacement, and keeps all their
  runs on the benchmark's grid): the middle 95% of the mean gap closed, and how often it reaches 50%;
- a bootstrap over start offsets (each trace keeps its place; its runs on the benchmark's grid are drawn with
  replacement), the same.

Each share is computed as the benchmark computes it: per setting from the mean costs, then averaged.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from spotrun.sim.engine import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT, SimJob
from spotrun.sim.sweep import gap_closed, sweep
from variant_table import HISTORIES, HOUR, REFERENCES, SETTINGS, diagnostic_markets, diagnostic_parser

TARGET = 0.5
# per setting: policy (default + history label, or a reference) -> {(trace, start sample): normalized cost}
Costs = list[dict[str, dict[tuple[str, int], float]]]


def all_costs(markets, every: float, processes, nodes: int) -> Costs:
    costs: Costs = []
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR, nodes * P3_2XLARGE_ON_DEMAND, nodes * P3_2XLARGE_SPOT)
        runs = sweep(markets, REFERENCES, job, every_seconds=every, processes=processes)
        for seen, history in HISTORIES.items():
            runs += [replace(r, policy="default" + seen) for r in sweep(
                markets, ["default"], job, every_seconds=every, processes=processes, history_seconds=history)]
        setting: dict[str, dict[tuple[str, int], float]] = {}
        for run in runs:
            setting.setdefault(run.policy, {})[(run.market, run.start)] = run.normalized_cost
        costs.append(setting)
    return costs


def mean_closure(costs: Costs, policy: str, picks: list[list[tuple[str, int]]]) -> float:
    """The mean over settings of `policy`'s gap closed on the runs `picks[setting]` (repeats count again)."""
    shares = []
    for setting, runs in zip(costs, picks, strict=True):
        up, best, ours = (np.mean([setting[p][run] for run in runs]) for p in (*REFERENCES, policy))
        shares.append(gap_closed(up, best, ours))
    return float(np.mean(shares))


def on_grid(costs: Costs, period: int, phase: int) -> list[list[tuple[str, int]]]:
    """Per setting, the runs whose start sample lies on the grid of `period` samples shifted by `phase`."""
    return [sorted(run for run in setting["omniscient"] if run[1] % period == phase) for setting in costs]


def over_traces(grid: list[list[tuple[str, int]]], rng: np.random.Generator) -> list[list[tuple[str, int]]]:
    traces = sorted({trace for trace, _ in grid[0]})
    drawn = rng.choice(len(traces), size=len(traces))
    return [[run for i in drawn for run in runs if run[0] == traces[i]] for runs in grid]


def over_starts(grid: list[list[tuple[str, int]]], rng: np.random.Generator) -> list[list[tuple[str, int]]]:
    resampled = []
    for runs in grid:
        picked = []
        for trace in sorted({t for t, _ in runs}):
            own = [run for run in runs if run[0] == trace]
            picked += [own[i] for i in rng.choice(len(own), size=len(own))]
        resampled.append(picked)
    return resampled


def bootstrap(costs: Costs, policy: str, grid, draw, resamples: int, seed: int) -> tuple[float, float, float]:
    """(2.5th percentile, 97.5th percentile, share of resamples at or above the target)."""
    rng = np.random.default_rng(seed)
    shares = np.array([mean_closure(costs, policy, draw(grid, rng)) for _ in range(resamples)])
    low, high = np.percentile(shares, [2.5, 97.5])
    return float(low), float(high), float(np.mean(shares >= TARGET))


def main() -> None:
    parser = diagnostic_parser(__doc__.splitlines()[0], every_hours=6.0)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder, markets, processes = diagnostic_markets(args)
    gap = markets[0][1].gap_seconds
    period = round(args.every_hours * HOUR / gap)
    if period % 2:
        raise SystemExit(f"--every-hours {args.every_hours:g} is an odd number of the traces' {gap:g} s samples")
    began = time.perf_counter()
    costs = all_costs(markets, period // 2 * gap, processes, args.nodes)
    grid = on_grid(costs, period, 0)
    print(f"{len(markets)} traces from {folder.name}; C = 48 h, the four settings; default's mean share of the "
          f"uniform_progress → omniscient gap; starts every {args.every_hours:g} h; {args.resamples} resamples:\n")
    reaches = f"reaches {TARGET:.0%}"
    print(f"| default | the benchmark's grid | grid shifted by half a period | traces resampled: 95% | {reaches} | "
          f"starts resampled: 95% | {reaches} |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for seen in HISTORIES:
        policy = "default" + seen
        shifted = mean_closure(costs, policy, on_grid(costs, period, period // 2))
        by_trace = bootstrap(costs, policy, grid, over_traces, args.resamples, args.seed)
        by_start = bootstrap(costs, policy, grid, over_starts, args.resamples, args.seed)
        print(f"| {'without' if not seen else 'with'} the market's history | "
              f"{mean_closure(costs, policy, grid):.2%} | {shifted:.2%} | "
              f"{by_trace[0]:.1%} – {by_trace[1]:.1%} | {by_trace[2]:.0%} | "
              f"{by_start[0]:.1%} – {by_start[1]:.1%} | {by_start[2]:.0%} |")
    print(f"\n{time.perf_counter() - began:.0f} s.")


if __name__ == "__main__":
    main()
