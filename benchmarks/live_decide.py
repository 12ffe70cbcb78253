"""What one live decision of the default policy costs: the first `decide` of a running job with a deadline (which
builds its DP table), its time and the process's peak memory, for a few job shapes.

    .venv/bin/python benchmarks/live_decide.py [--planning-step S] [--max-table-mb M]

The controller asks a running job's policy every `reconsider_every` (60 s). `--planning-step 60 --max-table-mb
1e9` plans in those one-minute steps whatever the table's size, as the policy did before the plan's step got a
floor of ten minutes and tables a cap; the defaults are the policy's own. Each shape runs in a fresh process, so the
peak memory is that decision's alone (plus the interpreter); a table over 8 GB is not built (this machine's memory).
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import time

HOUR = 3600.0
SHAPES = [(24.0, 20.0), (52.0, 48.0), (70.0, 48.0), (200.0, 150.0), (336.0, 200.0), (700.0, 300.0)]  # deadline, compute (h)


TOO_BIG = 8 << 30


def one_decision(
    deadline_hours: float, compute_hours: float, planning_step: float | None, max_table_mb: float | None
) -> dict:
    from spotrun.policy import Placement, PlacementContext, get_policy
    from spotrun.policy import deadline_aware

    policy = get_policy("default")
    planner = policy.deadline_policy
    if planning_step is not None:
        planner = dataclasses.replace(planner, planning_step=planning_step)
    if max_table_mb is not None:
        planner = dataclasses.replace(planner, max_table_bytes=int(max_table_mb * 2**20))
    policy = dataclasses.replace(policy, deadline_policy=planner)
    shapes = []
    table_of = deadline_aware.value_table
    deadline_aware.value_table = lambda shape, hazards: shapes.append(shape) or table_of(shape, hazards)
    ctx = PlacementContext(
        job_id=1, now=HOUR, zones=("a", "b"), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, deadline=deadline_hours * HOUR,
        estimated_duration=compute_hours * HOUR, current=Placement("a", "spot", 0.0), progress=0.5 * HOUR,
        step=60.0, on_demand_price=3.06, spot_price=0.9731,
    )
    view = deadline_aware.deadline_view(ctx)
    plan_step, unit = planner.plan_grid(ctx, view)
    planned = deadline_aware.job_shape(ctx, view, plan_step, unit, planner.idle_charge)
    if planned.table_bytes > TOO_BIG:
        return {"skipped": planned.table_bytes / 2**30}
    began = time.perf_counter()
    decision = policy.decide(ctx)
    seconds = time.perf_counter() - began
    return {
        "seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "plan_step": round(plan_step), "unit": round(unit), "table_mb": shapes[0].table_bytes / 2**20,
        "decision": f"{type(decision).__name__}: {decision.reason}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planning-step", type=float, default=None, help="the plan's least step, seconds")
    parser.add_argument("--max-table-mb", type=float, default=None, help="coarser steps for tables larger than this")
    parser.add_argument("--one", nargs=2, type=float, help=argparse.SUPPRESS)  # a child: deadline, compute
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_decision(*args.one, args.planning_step, args.max_table_mb)))
        return
    print("| deadline / compute | plan step | work unit | table | first decide | peak memory | decision |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for deadline, compute in SHAPES:
        command = [sys.executable, __file__, "--one", str(deadline), str(compute)]
        for option, value in (("--planning-step", args.planning_step), ("--max-table-mb", args.max_table_mb)):
            if value is not None:
                command += [option, str(value)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {deadline:g} h / {compute:g} h | failed: {done.stderr.strip().splitlines()[-1:]} ||||||")
            continue
        r = json.loads(done.stdout)
        if "skipped" in r:
            print(f"| {deadline:g} h / {compute:g} h | | | {r['skipped']:,.0f} GB: not built | | | |")
            continue
        print(f"| {deadline:g} h / {compute:g} h | {r['plan_step']} s | {r['unit']} s | {r['table_mb']:,.0f} MB "
              f"| {r['seconds']:.2f} s | {r['peak_mb']:,.0f} MB | {r['decision']} |")


if __name__ == "__main__":
    main()
