"""Where a policy sweep's time goes: each policy's runs alone, in this one process, with the CPU time the
process spent in user and kernel mode, its page faults, and a digest of the runs' costs (two versions of the code
that give the same digest gave the same costs to nine decimals). `--one-table` times one deadline-aware DP table.
`--tables` counts the deadline-aware DP tables default's runs ask for and compute, and replays the same requests
through other evictions and cache sizes: what a better cache could save.

    .venv/bin/python benchmarks/sweep_profile.py [--policy P ...] [--every-hours H] [--deadline-hours D]
        [--overhead-hours d] [--traces PATH] [--table-cache-gib G] [--one-table | --tables]

To compare two versions, run this alternately with PYTHONPATH pointing at each one's src/ (this machine is
noisy). `spotrun simulate` spreads the same runs over worker processes; this keeps them in one to count them.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
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


def table_requests(traces: Path, every_hours: float, deadline_hours: float, overhead_hours: float) -> dict:
    """Default's runs, recording each DP table they ask for (its key and size) and whether the cache computed it."""
    from spotrun.policy import deadline_aware, markov

    requests, computed = [], 0
    table_of = deadline_aware.value_table

    def recorded(shape, hazards):
        nonlocal computed
        computed += (shape, hazards) not in markov._tables
        table = table_of(shape, hazards)
        requests.append(((shape, hazards), table.values.nbytes))
        return table

    deadline_aware.value_table = recorded
    try:
        markov._tables.clear()
        profile_policy("default", traces, every_hours, deadline_hours, overhead_hours)
    finally:
        deadline_aware.value_table = table_of
    return {"requests": requests, "computed": computed}


def misses_lru(requests: Sequence[tuple[Hashable, int]], budget: int) -> int:
    """Tables computed by a cache of `budget` bytes that drops the least recently used first (markov's own rule)."""
    kept: OrderedDict[Hashable, int] = OrderedDict()
    misses = 0
    for key, size in requests:
        if key in kept:
            kept.move_to_end(key)
            continue
        misses += 1
        while kept and sum(kept.values()) + size > budget:
            kept.popitem(last=False)
        kept[key] = size
    return misses


def misses_farthest_next_use(requests: Sequence[tuple[Hashable, int]], budget: int) -> int:
    """Tables computed by a cache of `budget` bytes that knows the future and drops the table asked for again
    latest (Belady's rule; optimal for tables of one size, a close bound when sizes differ)."""
    next_use, upcoming = [0] * len(requests), {}
    for i in range(len(requests) - 1, -1, -1):
        key = requests[i][0]
        next_use[i], upcoming[key] = upcoming.get(key, len(requests)), i
    kept: dict[Hashable, tuple[int, int]] = {}  # key -> (size, the index of its next request)
    misses = 0
    for i, (key, size) in enumerate(requests):
        if key not in kept:
            misses += 1
            while kept and sum(s for s, _ in kept.values()) + size > budget:
                del kept[max(kept, key=lambda k: kept[k][1])]
        kept[key] = (size, next_use[i])
    return misses


def print_table_report(traces: Path, every_hours: float, deadline_hours: float, overhead_hours: float) -> None:
    from spotrun.policy import markov

    seen = table_requests(traces, every_hours, deadline_hours, overhead_hours)
    requests, budget = seen["requests"], markov.TABLE_BYTES_KEPT
    distinct = {key: size for key, size in requests}
    print(f"C = 48 h, D = {deadline_hours:g} h, d = {overhead_hours:g} h, starts every {every_hours:g} h; default's "
          f"runs in one process, {len(requests):,} table requests, {len(distinct)} distinct tables "
          f"({sum(distinct.values()) / 2**30:.2f} GiB)\n")
    print("| cache | tables computed |")
    print("| --- | --- |")
    print(f"| as run: least recently used out, {budget / 2**30:g} GiB | {seen['computed']} |")
    for scale in (1, 2, 4):
        print(f"| replayed: least recently used out, {scale * budget / 2**30:g} GiB | "
              f"{misses_lru(requests, scale * budget)} |")
    print(f"| replayed: asked again latest out (knows the future), {budget / 2**30:g} GiB | "
          f"{misses_farthest_next_use(requests, budget)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", help="default: every policy, omniscient included")
    parser.add_argument("--every-hours", type=float, default=12.0)
    parser.add_argument("--deadline-hours", type=float, default=70.0)
    parser.add_argument("--overhead-hours", type=float, default=0.2)
    parser.add_argument("--traces", type=Path, default=None, help="default: the 2022 single-node traces in ../shared")
    parser.add_argument("--one-table", action="store_true", help="time one DP table instead of the sweep")
    parser.add_argument("--tables", action="store_true", help="count default's DP tables and replay other caches")
    parser.add_argument("--table-cache-gib", type=float, default=None,
                        help="the deadline-aware policy's table cache for this run (default: the package's, 1 GiB)")
    args = parser.parse_args()
    if args.traces is None:
        from spotrun.traces import shared_traces_dir

        args.traces = shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022"
    if args.table_cache_gib is not None:
        from spotrun.policy import markov

        markov.TABLE_BYTES_KEPT = int(args.table_cache_gib * 2**30)
    if args.one_table:
        best = time_one_table(args.deadline_hours, args.overhead_hours)
        print(f"one {args.deadline_hours:g} h / {args.overhead_hours:g} h table, best of 20: {best * 1000:.0f} ms")
        return
    if args.tables:
        print_table_report(args.traces, args.every_hours, args.deadline_hours, args.overhead_hours)
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
