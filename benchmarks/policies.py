"""Placement-policy benchmark on the single-node AWS traces (the numbers in docs/benchmarks.md).

    .venv/bin/python benchmarks/policies.py [--traces DIR] [--processes N]
    .venv/bin/python benchmarks/policies.py --closure-only --every-hours 12   # a policy change, checked in ~30 s

For C = 48 h, d in {0.1, 0.2} h, D in {52, 70} h, starts every 6 h: mean normalized cost and misses of greedy,
uniform_progress, omniscient and default on every trace alone (policies see each step's availability, the paper's
model), default twice: seeing only the job's own time (the paper's setting) and seeing the market's history before
the start too (all of the trace before it, as a platform that keeps watching its markets has it), the same for
default and uniform_progress when they only see what the live controller sees and move as it does, make-before-break
(default there also with the trace before the start, and as one of a fleet of jobs from every start that run at once
and share what they see, as the controller shares tries between jobs), again with drain-first moves, to show what
make-before-break saves, and a multi-zone run (both zones of a GPU type in one market). Prints markdown.
``--closure-only`` prints only how much of the uniform_progress → omniscient gap default closes in each setting,
without and with the market's history.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from spotrun.cli.simulate import load_markets
from spotrun.sim.engine import Observe, SimJob
from spotrun.sim.sweep import PolicySummary, gap_closed, summarize, sweep
from spotrun.traces import shared_traces_dir

HOUR = 3600.0
SETTINGS = [(52.0, 0.1), (52.0, 0.2), (70.0, 0.1), (70.0, 0.2)]
POLICIES = ["greedy", "uniform_progress", "omniscient", "default"]
Setting = tuple[float, float]  # D, d in hours
PAPER = {(52.0, 0.1): (0.847, 0.754, 0.666), (52.0, 0.2): (0.865, 0.811, 0.701),
         (70.0, 0.1): (0.668, 0.617, 0.580), (70.0, 0.2): (0.696, 0.664, 0.608)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=None, help="folder of 1-node traces")
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--every-hours", type=float, default=6.0, help="hours between two start offsets (default 6)")
    parser.add_argument("--closure-only", action="store_true", help="only default's share of the UP → omniscient gap")
    parser.add_argument("--market-history-hours", type=float, default=math.inf,
                        help="hours of each trace before a start that 'default, market history' sees (default: all)")
    args = parser.parse_args()
    history = args.market_history_hours * HOUR
    folder = args.traces or shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    single = load_markets([folder], multi_zone=False)
    began = time.perf_counter()
    if args.closure_only:
        _closure_table(single, args.processes, args.every_hours * HOUR, history)
        print(f"\n{time.perf_counter() - began:.0f} s on {_cores()} cores.")
        return
    print(f"## Placement policies\n\n{len(single)} traces from {folder.name}; C = 48 h, starts every 6 h.\n")
    closure, closure_with_history, best, tails = _single_zone_table(single, args.processes, history)
    print(f"\nGap closed by default between uniform_progress and omniscient, mean over the settings: {closure:.2%} "
          f"(with the market's history: {closure_with_history:.2%})\n")
    _tails_table(tails)
    _live_model_table(single, args.processes, history, best)
    for gpu in ("v100_1", "k80_1"):
        zones = sorted(folder.glob(f"*_{gpu}.json"))
        if zones:
            _multi_zone_table(load_markets(zones, multi_zone=True), gpu, args.processes)
        else:
            print(f"\nMulti-zone, {gpu}: no *_{gpu}.json traces in {folder}")
    print(f"\nWhole benchmark: {time.perf_counter() - began:.0f} s on {_cores()} cores.")


def _single_zone_table(
    markets, processes, history: float,
) -> tuple[float, float, dict[Setting, float], dict[Setting, dict[str, PolicySummary]]]:
    """The paper model's table; returns default's mean gap closed without and with the history, omniscient's mean
    cost per setting (the live views' lower bound too: it knows the future whatever it is shown), and each
    setting's summaries for `_tails_table`."""
    print("| D / d | runs | greedy | uniform_progress | omniscient | default | default, market history "
          "| misses (all policies) | paper: greedy / UP / omniscient | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    closures, closures_with_history, bests, tails = [], [], {}, {}
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        began = time.perf_counter()
        summary = {s.policy: s for s in summarize(sweep(markets, POLICIES, job, processes=processes), POLICIES)}
        seconds = time.perf_counter() - began
        with_history = _default_shown(markets, job, processes, history_seconds=history)
        tails[(deadline, overhead)] = {**summary, "default, market history": with_history}
        up, best, ours = summary["uniform_progress"].mean, summary["omniscient"].mean, summary["default"].mean
        closures.append(gap_closed(up, best, ours))
        closures_with_history.append(gap_closed(up, best, with_history.mean))
        bests[(deadline, overhead)] = best
        misses = " / ".join(str(summary[p].misses) for p in POLICIES) + f" / {with_history.misses}"
        paper = " / ".join(f"{v:.3f}" for v in PAPER[(deadline, overhead)])
        cells = " | ".join(f"{summary[p].mean:.3f}" for p in POLICIES)
        print(f"| {deadline:g} h / {overhead:g} h | {summary['default'].runs} | {cells} | {with_history.mean:.3f} "
              f"| {misses} | {paper} | {seconds:.0f} |")
    return sum(closures) / len(closures), sum(closures_with_history) / len(closures_with_history), bests, tails


def _tails_table(tails: dict[Setting, dict[str, PolicySummary]]) -> None:
    """How often each policy's run cost more than on-demand from the start would have, and its dearest run."""
    columns = [*POLICIES, "default, market history"]
    print("Runs that cost more than on-demand from the start (the share of runs; the dearest run's normalized cost):\n")
    print("| D / d | " + " | ".join(columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for (deadline, overhead), summary in tails.items():
        cells = " | ".join(
            f"{summary[c].dearer_than_on_demand:.1%}, {summary[c].worst:.3f}" for c in columns
        )
        print(f"| {deadline:g} h / {overhead:g} h | {cells} |")
    print()


def _closure_table(markets, processes, every_seconds: float, history: float) -> None:
    names = ["uniform_progress", "omniscient", "default"]
    print(f"starts every {every_seconds / HOUR:g} h\n\n| D / d | uniform_progress | omniscient | default | gap closed "
          "| default, market history | gap closed | misses |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    closures, closures_with_history = [], []
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        records = sweep(markets, names, job, every_seconds=every_seconds, processes=processes)
        summary = {s.policy: s for s in summarize(records, names)}
        with_history = _default_shown(markets, job, processes, every_seconds=every_seconds, history_seconds=history)
        up, best, ours = (summary[name].mean for name in names)
        closures.append(gap_closed(up, best, ours))
        closures_with_history.append(gap_closed(up, best, with_history.mean))
        misses = " / ".join(str(summary[name].misses) for name in names) + f" / {with_history.misses}"
        print(f"| {deadline:g} h / {overhead:g} h | {up:.4f} | {best:.4f} | {ours:.4f} | {closures[-1]:.1%} "
              f"| {with_history.mean:.4f} | {closures_with_history[-1]:.1%} | {misses} |")
    print(f"\nmean gap closed: {sum(closures) / len(closures):.2%}; "
          f"with the market's history: {sum(closures_with_history) / len(closures_with_history):.2%}")


LIVE_VIEWS: dict[Observe, str] = {
    "launches": "Seeing only what the live controller sees (own launches, the instance held, preemptions) and moving "
                "as it does, make-before-break: a move that finds no spot keeps the instance held",
    "drain-first": "The same, but moving drain-first (the instance held is given up before the next is launched, so "
                   "a move that finds no spot leaves nothing held): what make-before-break moves save",
}


def _live_model_table(markets, processes, history: float, best: dict[tuple[float, float], float]) -> None:
    """uniform_progress and default in the live controller's views; in the make-before-break one (the controller's
    own) also default with the market's history, as the controller hands it other jobs' tries: shown the trace before
    the start (more than launches tell, but nothing of the time the job runs), and as one of a fleet of jobs, one from
    every start, that run at once and share what they see (`sim.fleet`). `best`: omniscient's mean per setting."""
    names = ["uniform_progress", "default"]
    for observe, title in LIVE_VIEWS.items():
        shared = observe == "launches"
        columns = names + (["default, market history", "default, fleet"] if shared else [])
        print(f"\n{title}:\n")
        print("| D / d | " + " | ".join(columns) + " | misses |")
        print("| --- |" + " --- |" * (len(columns) + 1))
        closures: dict[str, list[float]] = {}
        for deadline, overhead in SETTINGS:
            job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
            summary = {s.policy: s for s in summarize(sweep(markets, names, job, observe=observe, processes=processes),
                                                      names)}
            if shared:
                summary[columns[2]] = _default_shown(markets, job, processes, observe=observe, history_seconds=history)
                summary[columns[3]] = _default_shown(markets, job, processes, observe=observe, fleet=True)
            up = summary["uniform_progress"].mean
            for column in columns[1:]:
                closures.setdefault(column, []).append(gap_closed(up, best[(deadline, overhead)], summary[column].mean))
            cells = " | ".join(f"{summary[column].mean:.3f}" for column in columns)
            misses = " / ".join(str(summary[column].misses) for column in columns)
            print(f"| {deadline:g} h / {overhead:g} h | {cells} | {misses} |")
        print("\nGap closed between uniform_progress in this view and omniscient, mean over the settings: "
              + "; ".join(f"{column} {sum(c) / len(c):.1%}" for column, c in closures.items()))


def _default_shown(markets, job: SimJob, processes, **shown):
    """default's summary with what `shown` (`sweep`'s every_seconds, observe, history_seconds or fleet) gives it."""
    return summarize(sweep(markets, ["default"], job, processes=processes, **shown), ["default"])[0]


def _multi_zone_table(markets, gpu, processes) -> None:
    names = ["uniform_progress", "omniscient", "default"]
    label = markets[0][0]
    print(f"\nMulti-zone, {label} in one market (zone moves count as restarts):\n")
    print("| D / d | uniform_progress | omniscient | default | default's moves per run | misses |")
    print("| --- | --- | --- | --- | --- | --- |")
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        summary = {s.policy: s for s in summarize(sweep(markets, names, job, processes=processes), names)}
        misses = " / ".join(str(summary[p].misses) for p in names)
        print(f"| {deadline:g} h / {overhead:g} h | {summary['uniform_progress'].mean:.3f} | {summary['omniscient'].mean:.3f} "
              f"| {summary['default'].mean:.3f} | {summary['default'].moves:.1f} | {misses} |")


def _cores() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    main()
