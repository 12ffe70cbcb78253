"""Where a policy sweep's time goes: each policy's runs alone, in this one process, with the CPU time the
process spent in user and kernel mode, its page faults, and a digest of the runs' costs (two versions of the code
that give the same digest gave the same costs to nine decimals). `--one-table` times one deadline-aware DP table.

    .venv/bin/python benchmarks/sweep_profile.py [--policy P ...] [--every-hours H] [--deadline-hours D]
        [--overhead-hours d] [--traces PATH] [--one-table]

To compare two versions, run this alternately with PYTHONPATH pointing at each one's src/ (this machine is
noisy). `spotrun simulate` spreads the same runs over worker processes; this keeps them in one to count them.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import time
from pathlib import Path

HOUR = 3600.0


def profile_policy(policy: str, traces: Path, every_hours: float, deadline_hours: float, overhead_hours: float) -> dict:
    from spotrun.cli.simulate import load_markets
    from spotrun.sim import sweep
    from spotrun.sim.engine import SimJob

    job = SimJob(48 * HOUR, deadline_hours * HOUR, overhead_hours * HOUR)
    tasks = sweep.sweep_tasks(load_markets([traces], False), job, every_hours * HOUR)
    getattr(sweep, "keep_freed_memory", lambda: None)()  # as the sweep's workers do (code since 7c1601a)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    records = [record for task in tasks for record in sweep.run_one(task, (policy,), job, "tick")]
    seconds, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    costs = repr([(r.market, r.start, round(r.cost, 9)) for r in records]).encode()
    return {
        "policy": policy, "runs": len(records), "seconds": seconds, "user": after.ru_utime - before.ru_utime,
        "sys": after.ru_stime - before.ru_stime, "faults": after.ru_minflt - before.ru_minflt,
        "digest": hashlib.sha256(costs).hexdigest()[:12],
    }


def time_one_table(deadline_hours: float, overhead_hours: float, repeats: int = 20) -> float:
    """The best of `repeats` computations of one table (spot lasting ~11 h, gaps ~3 h) into memory already faulted
    in, in seconds: the DP's arithmetic alone."""
    import numpy as np

    from spotrun.policy import markov
    from spotrun.policy.run_ages import RunHazards, bucket_hazards

    shape = markov.JobShape.of(600.0, 48 * HOUR, deadline_hours * HOUR, overhead_hours * HOUR, 3.06, 0.9731, 120.0)
    hazards = RunHazards(bucket_hazards(1 / 64), bucket_hazards(1 / 16))
    out = np.empty(markov._table_dims(shape, hazards), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats + 1):  # the first fills `out` in
        started = time.perf_counter()
        markov._compute_values(shape, hazards, out)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", help="default: every policy, omniscient included")
    parser.add_argument("--every-hours", type=float, default=12.0)
    parser.add_argument("--deadline-hours", type=float, default=70.0)
    parser.add_argument("--overhead-hours", type=float, default=0.2)
    parser.add_argument("--traces", type=Path, default=None, help="default: the 2022 single-node traces in ../shared")
    parser.add_argument("--one-table", action="store_true", help="time one DP table instead of the sweep")
    args = parser.parse_args()
    if args.traces is None:
        from spotrun.traces import shared_traces_dir

        args.traces = shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    if args.one_table:
        best = time_one_table(args.deadline_hours, args.overhead_hours)
        print(f"one {args.deadline_hours:g} h / {args.overhead_hours:g} h table, best of 20: {best * 1000:.0f} ms")
        return
    policies = args.policy or ["on_demand", "greedy", "uniform_progress", "default", "omniscient"]
    print(f"C = 48 h, D = {args.deadline_hours:g} h, d = {args.overhead_hours:g} h, starts every {args.every_hours:g} h; "
          "one process\n")
    print("| policy | runs | seconds | user s | sys s | page faults | costs' digest |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for policy in policies:
        row = profile_policy(policy, args.traces, args.every_hours, args.deadline_hours, args.overhead_hours)
        print(f"| {row['policy']} | {row['runs']} | {row['seconds']:.1f} | {row['user']:.1f} | {row['sys']:.1f} | "
              f"{row['faults']:,} | {row['digest']} |")


if __name__ == "__main__":
    main()
