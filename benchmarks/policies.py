"""Placement-policy benchmark on the single-node AWS traces (the numbers in docs/benchmarks.md).

    .venv/bin/python benchmarks/policies.py [--traces DIR] [--processes N]
    .venv/bin/python benchmarks/policies.py --closure-only --every-hours 12   # a policy change, checked in ~30 s

For C = 48 h, d in {0.1, 0.2} h, D in {52, 70} h, starts every 6 h: mean normalized cost and misses of greedy,
uniform_progress, omniscient and default on every trace alone (policies see each step's availability, the paper's
model), the same for default and uniform_progress when they only see what the live controller sees, and a
multi-zone run (both zones of a GPU type in one market). Prints markdown. ``--closure-only`` prints only how much
of the uniform_progress → omniscient gap default closes in each setting.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from spotrun.cli.simulate import load_markets
from spotrun.sim.engine import SimJob
from spotrun.sim.sweep import summarize, sweep
from spotrun.traces import shared_traces_dir

HOUR = 3600.0
SETTINGS = [(52.0, 0.1), (52.0, 0.2), (70.0, 0.1), (70.0, 0.2)]
POLICIES = ["greedy", "uniform_progress", "omniscient", "default"]
PAPER = {(52.0, 0.1): (0.847, 0.754, 0.666), (52.0, 0.2): (0.865, 0.811, 0.701),
         (70.0, 0.1): (0.668, 0.617, 0.580), (70.0, 0.2): (0.696, 0.664, 0.608)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=None, help="folder of 1-node traces")
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--every-hours", type=float, default=6.0, help="hours between two start offsets (default 6)")
    parser.add_argument("--closure-only", action="store_true", help="only default's share of the UP → omniscient gap")
    args = parser.parse_args()
    folder = args.traces or shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    single = load_markets([folder], multi_zone=False)
    began = time.perf_counter()
    if args.closure_only:
        _closure_table(single, args.processes, args.every_hours * HOUR)
        print(f"\n{time.perf_counter() - began:.0f} s on {_cores()} cores.")
        return
    print(f"## Placement policies\n\n{len(single)} traces from {folder.name}; C = 48 h, starts every 6 h.\n")
    closure = _single_zone_table(single, args.processes)
    print(f"\nGap closed by default between uniform_progress and omniscient, mean over the settings: {closure:.0%}\n")
    _live_model_table(single, args.processes)
    for gpu in ("v100_1", "k80_1"):
        pair = load_markets(sorted(folder.glob(f"*_{gpu}.json")), multi_zone=True)
        _multi_zone_table(pair, gpu, args.processes)
    print(f"\nWhole benchmark: {time.perf_counter() - began:.0f} s on {_cores()} cores.")


def _single_zone_table(markets, processes) -> float:
    print("| D / d | runs | greedy | uniform_progress | omniscient | default | misses (all policies) | paper: greedy / UP / omniscient | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    closures = []
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        began = time.perf_counter()
        summary = {s.policy: s for s in summarize(sweep(markets, POLICIES, job, processes=processes), POLICIES)}
        seconds = time.perf_counter() - began
        up, best, ours = summary["uniform_progress"].mean, summary["omniscient"].mean, summary["default"].mean
        closures.append((up - ours) / (up - best))
        misses = " / ".join(str(summary[p].misses) for p in POLICIES)
        paper = " / ".join(f"{v:.3f}" for v in PAPER[(deadline, overhead)])
        cells = " | ".join(f"{summary[p].mean:.3f}" for p in POLICIES)
        print(f"| {deadline:g} h / {overhead:g} h | {summary['default'].runs} | {cells} | {misses} | {paper} | {seconds:.0f} |")
    return sum(closures) / len(closures)


def _closure_table(markets, processes, every_seconds: float) -> None:
    names = ["uniform_progress", "omniscient", "default"]
    print(f"starts every {every_seconds / HOUR:g} h\n\n| D / d | uniform_progress | omniscient | default | gap closed | misses |")
    print("| --- | --- | --- | --- | --- | --- |")
    closures = []
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        records = sweep(markets, names, job, every_seconds=every_seconds, processes=processes)
        summary = {s.policy: s for s in summarize(records, names)}
        up, best, ours = (summary[name].mean for name in names)
        closures.append((up - ours) / (up - best) if up - best > 1e-12 else float("nan"))  # no gap: nothing to close
        misses = " / ".join(str(summary[name].misses) for name in names)
        print(f"| {deadline:g} h / {overhead:g} h | {up:.4f} | {best:.4f} | {ours:.4f} | {closures[-1]:.1%} | {misses} |")
    print(f"\nmean gap closed: {sum(closures) / len(closures):.1%}")


def _live_model_table(markets, processes) -> None:
    names = ["uniform_progress", "default"]
    print("\nSeeing only what the live controller sees (own launches, the instance held, preemptions):\n")
    print("| D / d | uniform_progress | default | misses |")
    print("| --- | --- | --- | --- |")
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR)
        summary = {s.policy: s for s in summarize(sweep(markets, names, job, observe="launches", processes=processes), names)}
        print(f"| {deadline:g} h / {overhead:g} h | {summary['uniform_progress'].mean:.3f} | {summary['default'].mean:.3f} "
              f"| {summary['uniform_progress'].misses} / {summary['default'].misses} |")


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
