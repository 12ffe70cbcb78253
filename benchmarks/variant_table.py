"""The table the default policy's diagnostics print (policy_ceiling.py, release_rule.py): variants of the policy side
by side, without and with the market's history, per setting of the paper-model benchmark, each as its mean normalized
cost and its share of the uniform_progress → omniscient gap."""

from __future__ import annotations

import argparse
import math
import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path

from spotrun.cli.simulate import load_markets
from spotrun.sim.engine import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT, SimJob
from spotrun.sim.market import Market
from spotrun.sim.sweep import gap_closed, summarize, sweep
from spotrun.traces import shared_traces_dir

HOUR = 3600.0
SETTINGS = [(52.0, 0.1), (52.0, 0.2), (70.0, 0.1), (70.0, 0.2)]
REFERENCES = ["uniform_progress", "omniscient"]
HISTORIES = {"": 0.0, ", market history": math.inf}  # all the trace before each start, or none

# (job, history seconds, variant) -> default's (mean normalized cost, misses) with that variant in place
RunVariant = Callable[[SimJob, float, str], tuple[float, int]]


def diagnostic_parser(description: str, every_hours: float) -> argparse.ArgumentParser:
    """The options every such diagnostic takes: its traces, gangs, worker processes and starts."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--traces", type=Path, default=None, help="folder of traces (default: the 2022 1-node ones)")
    parser.add_argument("--nodes", type=int, default=1, help="a gang: spot while a trace counts this many instances")
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--every-hours", type=float, default=every_hours,
                        help=f"hours between two start offsets (default {every_hours:g})")
    return parser


def diagnostic_markets(args: argparse.Namespace) -> tuple[Path, list[tuple[str, Market]], int | None]:
    """The traces' folder, one market per trace, and the worker processes: the variants are forked into them, so
    one where processes are not forked."""
    processes = args.processes if multiprocessing.get_start_method() == "fork" else 1
    folder = args.traces or shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    return folder, load_markets([folder], multi_zone=False, nodes=args.nodes), processes


def print_variant_table(
    markets, variants: Sequence[str], run_variant: RunVariant, every: float, processes: int | None, nodes: int = 1,
) -> None:
    names = [variant + seen for seen in HISTORIES for variant in variants]
    print("| D / d | uniform_progress | omniscient | " + " | ".join(names) + " | misses |")
    print("| --- " * (3 + len(names)) + "| --- |")
    columns: list[list[float]] = [[] for _ in names]
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR, nodes * P3_2XLARGE_ON_DEMAND, nodes * P3_2XLARGE_SPOT)
        refs = {s.policy: s for s in summarize(sweep(markets, REFERENCES, job, every_seconds=every,
                                                     processes=processes), REFERENCES)}
        up, best = refs["uniform_progress"].mean, refs["omniscient"].mean
        runs = [run_variant(job, history, variant) for history in HISTORIES.values() for variant in variants]
        cells = []
        for column, (mean, _) in zip(columns, runs):
            column.append(gap_closed(up, best, mean))
            cells.append(f"{mean:.4f} ({column[-1]:.1%})")
        misses = " / ".join(str(m) for m in [refs[r].misses for r in REFERENCES] + [m for _, m in runs])
        print(f"| {deadline:g} h / {overhead:g} h | {up:.4f} | {best:.4f} | {' | '.join(cells)} | {misses} |")
    print(f"| mean gap closed | | | {' | '.join(f'{sum(c) / len(c):.2%}' for c in columns)} | |")
