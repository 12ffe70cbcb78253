"""Should the default policy ever give up on-demand to wait for spot? A diagnostic, not a policy.

    .venv/bin/python benchmarks/release_rule.py --processes 2                       # 2022 traces, starts every 12 h
    .venv/bin/python benchmarks/release_rule.py --processes 2 --every-hours 6
    .venv/bin/python benchmarks/release_rule.py --processes 2 --every-hours 6 \\
        --traces /work/shared/traces/preemption/4-node/aws-08-03-2023 --nodes 4
    .venv/bin/python benchmarks/release_rule.py --processes 2 --releases 70 0.2   # each run's releases, one setting

Holding on-demand, the default policy may choose to idle: it gives the instance up and spends slack waiting for
spot, which costs a restart if spot does not come. The chance it bets on is its fitted hazard of the gap closing at
the gap's age, which for gaps of a day or more is the fitted form's floor. Three variants of the same policy code
side by side, each without and with the market's history (all the trace before each start):
- "as kept": the choice is the plan's;
- "never": idling is not among the choices while on-demand is held (on-demand is left only for spot);
- "within experience": idling is not a choice while on-demand is held and the gap going on has lasted longer than
  every gap the job has seen end (the plan's hazard there is the form's extrapolation, not something seen).

Prints a markdown table of mean normalized cost and the share of the uniform_progress → omniscient gap closed
(docs/benchmarks.md, "Eighteenth round"). With `--releases D d` it looks at one setting instead: where the policy as
kept gave on-demand up (the trace, how old the gap was, how soon spot came back) and which runs "never" made cheaper
or dearer. The variants are forked into the sweep's worker processes, so this needs
the "fork" start method (Linux), else it runs in one process.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from itertools import repeat

from spotrun.policy import deadline_aware, get_policy
from spotrun.policy.placement import PlacementContext
from spotrun.sim.engine import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT, SimJob, run_job
from spotrun.sim.sweep import SweepTask, history_before, summarize, sweep, sweep_tasks
from variant_table import diagnostic_markets, diagnostic_parser, print_variant_table

HOUR = 3600.0

_values_as_kept = deadline_aware._option_values
_choose_as_kept = deadline_aware.DeadlineAwarePolicy._choose
_may_idle_on_demand = [True]  # set by the variant's _choose for the step, read by _option_values


def _option_values_gated(table, hazards, steps_left, start, held, belief, drains_first=False):
    values = _values_as_kept(table, hazards, steps_left, start, held, belief, drains_first)
    if held == "on-demand" and not _may_idle_on_demand[0]:
        values = {**values, "idle": math.inf}
    return values


def _never(ctx: PlacementContext) -> bool:
    return False


def _within_experience(ctx: PlacementContext) -> bool:
    """Idling is allowed unless a zone's gap going on is older than every gap seen to end there."""
    log = ctx.spot_log()
    for zone in ctx.zones:
        runs = log.zone(zone)
        if runs.available is False and ctx.now - runs.since > max(runs.gaps, default=0.0):
            return False
    return True


VARIANTS: dict[str, Callable[[PlacementContext], bool] | None] = {
    "as kept": None, "never": _never, "within experience": _within_experience,
}


@contextmanager
def variant_in_place(may_idle: Callable[[PlacementContext], bool] | None) -> Iterator[None]:
    def choose(self, ctx, view, step, unit):
        _may_idle_on_demand[0] = may_idle(ctx)
        return _choose_as_kept(self, ctx, view, step, unit)

    if may_idle is not None:
        deadline_aware._option_values = _option_values_gated
        deadline_aware.DeadlineAwarePolicy._choose = choose
    try:
        yield
    finally:
        deadline_aware._option_values = _values_as_kept
        deadline_aware.DeadlineAwarePolicy._choose = _choose_as_kept


def default_mean(markets, job: SimJob, every: float, history: float, processes: int | None, variant: str):
    """default's mean normalized cost and misses with the variant in place."""
    with variant_in_place(VARIANTS[variant]):
        records = sweep(markets, ["default"], job, every_seconds=every, processes=processes, history_seconds=history)
    summary = summarize(records, ["default"])[0]
    return summary.mean, summary.misses


def _releases_of(task: SweepTask, job: SimJob, history: float) -> tuple[float, list[tuple[float, float, float]]]:
    """default's cost in one run, and each time it gave on-demand up to idle: (hour of the run, age of the gap in
    hours, counted on the whole trace, hours until spot came back)."""
    market = task.market
    result = run_job(get_policy("default"), market.zones, market.available[:, task.start :], market.gap_seconds, job,
                     seen_before=history_before(task, history))
    releases = []
    for attempt in result.attempts:
        if attempt.market == "on-demand" and attempt.end_reason == "released":
            at = task.start + round(attempt.ended_at / market.gap_seconds)
            up_before, up_after = market.available[0, :at].nonzero()[0], market.available[0, at:].nonzero()[0]
            age = at - (up_before[-1] + 1) if len(up_before) else math.inf
            back = up_after[0] if len(up_after) else math.inf
            releases.append((attempt.ended_at / HOUR, age * market.gap_seconds / HOUR, back * market.gap_seconds / HOUR))
    return result.cost / job.on_demand_cost, releases


def print_releases(markets, job: SimJob, every: float, history: float, processes: int | None) -> None:
    tasks = sweep_tasks(markets, job, every)
    runs = {}
    for variant in ("as kept", "never"):
        with variant_in_place(VARIANTS[variant]):
            if processes == 1:
                runs[variant] = [_releases_of(task, job, history) for task in tasks]
                continue
            with ProcessPoolExecutor(processes) as pool:  # forked with the variant in place
                runs[variant] = list(pool.map(_releases_of, tasks, repeat(job), repeat(history), chunksize=4))
    released = [(task, kept, never[0]) for task, kept, never in zip(tasks, runs["as kept"], runs["never"]) if kept[1]]
    print(f"{len(released)} of {len(tasks)} runs gave on-demand up to idle at least once; by trace: "
          + ", ".join(f"{label} {n}" for label, n in Counter(task.label for task, _, _ in released).items()))
    cheaper = sum(never < kept - 1e-9 for _, (kept, _), never in released)
    dearer = sum(never > kept + 1e-9 for _, (kept, _), never in released)
    print(f"never made {cheaper} of them cheaper and {dearer} dearer\n")
    print("| gap's age at the release | releases | spot back within 2 h | within 6 h |\n| --- | --- | --- | --- |")
    ages = [(age, back) for _, (_, releases), _ in released for _, age, back in releases]
    for low, high in [(0, 6), (6, 12), (12, 24), (24, math.inf)]:
        backs = [back for age, back in ages if low <= age < high]
        if backs:
            print(f"| {low}-{high} h | {len(backs)} | {sum(b <= 2 for b in backs) / len(backs):.0%} "
                  f"| {sum(b <= 6 for b in backs) / len(backs):.0%} |")
    print("\nthe runs where giving on-demand up paid most (never's cost - as kept's; releases as (hour, gap age, "
          "spot back in), hours):")
    for task, (kept, releases), never in sorted(released, key=lambda run: run[1][0] - run[2])[:5]:
        shown = ", ".join(f"({hour:.1f}, {age:.1f}, {back:.1f})" for hour, age, back in releases)
        print(f"- {task.label} from sample {task.start}: {never - kept:+.4f}; {shown}")


def main() -> None:
    parser = diagnostic_parser(__doc__.splitlines()[0], every_hours=12.0)
    parser.add_argument("--releases", type=float, nargs=2, metavar=("D", "d"),
                        help="instead of the table: each run's releases of on-demand at this deadline and overhead (h)")
    parser.add_argument("--history-hours", type=float, default=math.inf,
                        help="with --releases: hours of the trace before each start shown (default: all)")
    args = parser.parse_args()
    folder, markets, processes = diagnostic_markets(args)
    every = args.every_hours * HOUR
    began = time.perf_counter()
    if args.releases:
        deadline, overhead = args.releases
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR, args.nodes * P3_2XLARGE_ON_DEMAND,
                     args.nodes * P3_2XLARGE_SPOT)
        print(f"{len(markets)} traces from {folder.name}, {args.nodes} node(s); C = 48 h, D = {deadline:g} h, "
              f"d = {overhead:g} h, starts every {args.every_hours:g} h, history {args.history_hours:g} h\n")
        print_releases(markets, job, every, args.history_hours * HOUR, processes)
        print(f"\n{time.perf_counter() - began:.0f} s.")
        return
    print(f"{len(markets)} traces from {folder.name}, {args.nodes} node(s); C = 48 h, starts every "
          f"{args.every_hours:g} h. Mean normalized cost of default (gap closed):\n")

    def run_variant(job: SimJob, history: float, variant: str) -> tuple[float, int]:
        return default_mean(markets, job, every, history, processes, variant)

    print_variant_table(markets, list(VARIANTS), run_variant, every, processes, args.nodes)
    print(f"\n{time.perf_counter() - began:.0f} s.")


if __name__ == "__main__":
    main()
