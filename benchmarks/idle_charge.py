"""What should the default policy's plan charge itself for a step of idling? The measurement behind its idle_charge.

    .venv/bin/python benchmarks/idle_charge.py --processes 2                        # 2022 traces, starts every 6 h
    .venv/bin/python benchmarks/idle_charge.py --processes 2 --leave-one-out        # the charge chosen per held-out trace
    .venv/bin/python benchmarks/idle_charge.py --processes 2 \\
        --traces /work/shared/traces/availability/16-node/aws-08-27-2023
    .venv/bin/python benchmarks/idle_charge.py --processes 2 \\
        --traces /work/shared/traces/preemption/4-node/aws-08-03-2023 --nodes 4

The policy's plan is the least expected cost under spot's fitted hazards, taken as known and fixed. Idling spends
slack, which is worth most when spot later turns out better than the fit said; a plan that takes the fit as the
truth spends it early (waiting through a long gap at a job's start, giving on-demand up to wait). Charging each
planned idle step a share of an on-demand step (never billed) makes the plan keep slack. The same policy code is
run with each charge (`--charges`) side by side, without and with the market's history (all the trace before each
start), as mean normalized cost and share of the uniform_progress → omniscient gap (docs/benchmarks.md, "Twentieth
round"). `--leave-one-out` instead picks, for each trace, the charge that closes most of the gap on the other
traces (with the history) and reports the gap closed with each trace run at the charge chosen without it.

The charge is forked into the sweep's worker processes, so this needs the "fork" start method (Linux), else it
runs in one process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from spotrun.policy import deadline_aware
from spotrun.sim.engine import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT, SimJob
from spotrun.sim.sweep import RunRecord, gap_closed, summarize, sweep
from variant_table import HOUR, REFERENCES, SETTINGS, diagnostic_markets, diagnostic_parser, print_variant_table

_job_shape_as_kept = deadline_aware.job_shape


@contextmanager
def charging(charge: float) -> Iterator[None]:
    """The policy's plans charge `charge` of an on-demand step per idle step, whatever the policy's own setting."""
    deadline_aware.job_shape = lambda ctx, view, step, unit, idle_charge=0.0, spot_zone=None: _job_shape_as_kept(
        ctx, view, step, unit, charge, spot_zone
    )
    try:
        yield
    finally:
        deadline_aware.job_shape = _job_shape_as_kept


def variant_name(charge: float) -> str:
    return f"charge {charge:g}"


def default_runs(markets, job: SimJob, every: float, history: float, processes, charge: float) -> list[RunRecord]:
    with charging(charge):
        return sweep(markets, ["default"], job, every_seconds=every, processes=processes, history_seconds=history)


def print_table(markets, charges: list[float], every: float, processes, nodes: int) -> None:
    by_name = {variant_name(charge): charge for charge in charges}

    def run_variant(job: SimJob, history: float, variant: str) -> tuple[float, int]:
        summary = summarize(default_runs(markets, job, every, history, processes, by_name[variant]), ["default"])[0]
        return summary.mean, summary.misses

    print_variant_table(markets, list(by_name), run_variant, every, processes, nodes)


def leave_one_out(markets, charges: list[float], every: float, processes, nodes: int) -> None:
    """Per held-out trace, the charge the other traces pick (mean gap closed over the settings, with the history)."""
    costs: dict[tuple[float, float], dict[str, dict[tuple[str, int], float]]] = {}
    for deadline, overhead in SETTINGS:
        job = SimJob(48 * HOUR, deadline * HOUR, overhead * HOUR, nodes * P3_2XLARGE_ON_DEMAND, nodes * P3_2XLARGE_SPOT)
        runs = {policy: [r for r in sweep(markets, REFERENCES, job, every_seconds=every, processes=processes)
                         if r.policy == policy] for policy in REFERENCES}
        runs.update({variant_name(c): default_runs(markets, job, every, math.inf, processes, c) for c in charges})
        costs[(deadline, overhead)] = {name: {(r.market, r.start): r.normalized_cost for r in rs}
                                       for name, rs in runs.items()}
    labels = [label for label, _ in markets]

    def closure(chosen: dict[str, float], keep: set[str]) -> float:
        shares = []
        for setting in costs.values():
            runs = [run for run in setting["omniscient"] if run[0] in keep]
            up, best = (np.mean([setting[p][run] for run in runs]) for p in REFERENCES)
            ours = np.mean([setting[variant_name(chosen[run[0]])][run] for run in runs])
            shares.append(gap_closed(up, best, ours))
        return float(np.mean(shares))

    print("| held out | charge chosen on the others | gap closed on the others |")
    print("| --- | --- | --- |")
    chosen = {}
    for held in labels:
        others = set(labels) - {held}
        scores = {c: closure(dict.fromkeys(labels, c), others) for c in charges}
        chosen[held] = max(scores, key=scores.get)
        print(f"| {held} | {chosen[held]:g} | {scores[chosen[held]]:.2%} |")
    for charge in charges:
        print(f"\nevery trace at charge {charge:g}: {closure(dict.fromkeys(labels, charge), set(labels)):.2%}", end="")
    print(f"\neach trace at the charge chosen without it: {closure(chosen, set(labels)):.2%}")


def main() -> None:
    parser = diagnostic_parser(__doc__.splitlines()[0], every_hours=6.0)
    parser.add_argument("--charges", type=float, nargs="+", default=[0.0, 0.02, 0.05, 0.1, 0.2])
    parser.add_argument("--leave-one-out", action="store_true", help="choose the charge leaving each trace out")
    args = parser.parse_args()
    folder, markets, processes = diagnostic_markets(args)
    every = args.every_hours * HOUR
    began = time.perf_counter()
    print(f"{len(markets)} traces from {folder.name}" + (f", gangs of {args.nodes}" if args.nodes > 1 else "")
          + f"; C = 48 h, starts every {args.every_hours:g} h. Default's plan charged per idle step (a share of an "
          "on-demand step):\n")
    if args.leave_one_out:
        leave_one_out(markets, args.charges, every, processes, args.nodes)
    else:
        print_table(markets, args.charges, every, processes, args.nodes)
    print(f"\n{time.perf_counter() - began:.0f} s.")


if __name__ == "__main__":
    main()
