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
import bisect
import hashlib
import resource
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
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


Victim = Callable[["OrderedDict[Hashable, int]", Counter, int], Hashable]  # (kept, asked so far, request index)


def _replayed(requests: Sequence[tuple[Hashable, int]], budget: int, victim: Victim) -> int:
    """Tables computed by a cache of `budget` bytes that drops `victim(...)` until a new table fits; `kept` lists
    the tables least recently asked first."""
    kept: OrderedDict[Hashable, int] = OrderedDict()
    asked: Counter[Hashable] = Counter()
    misses = 0
    for i, (key, size) in enumerate(requests):
        asked[key] += 1
        if key in kept:
            kept.move_to_end(key)
            continue
        misses += 1
        while kept and sum(kept.values()) + size > budget:
            del kept[victim(kept, asked, i)]
        kept[key] = size
    return misses


def misses_lru(requests: Sequence[tuple[Hashable, int]], budget: int) -> int:
    """Dropping the least recently used first (markov's own rule)."""
    return _replayed(requests, budget, lambda kept, asked, i: next(iter(kept)))


def misses_lfu(requests: Sequence[tuple[Hashable, int]], budget: int) -> int:
    """Dropping the table asked for least often so far (dropped tables keep their count; ties: the least recent)."""
    return _replayed(requests, budget, lambda kept, asked, i: min(kept, key=asked.__getitem__))


def misses_segmented_lru(requests: Sequence[tuple[Hashable, int]], budget: int, protected_share: float) -> int:
    """Tables computed by a segmented LRU: a table asked for again moves to a protected segment of up to
    `protected_share` of the budget (its least recent going back to probation); tables are dropped from probation
    first, least recent first."""
    probation: OrderedDict[Hashable, int] = OrderedDict()
    protected: OrderedDict[Hashable, int] = OrderedDict()
    misses = 0
    for key, size in requests:
        if key in protected:
            protected.move_to_end(key)
            continue
        if key in probation:
            protected[key] = probation.pop(key)
            while sum(protected.values()) > protected_share * budget and len(protected) > 1:
                demoted, demoted_size = protected.popitem(last=False)
                probation[demoted] = demoted_size
            continue
        misses += 1
        while (probation or protected) and sum(probation.values()) + sum(protected.values()) + size > budget:
            (probation or protected).popitem(last=False)
        probation[key] = size
    return misses


def misses_farthest_next_use(requests: Sequence[tuple[Hashable, int]], budget: int) -> int:
    """Dropping the table asked for again latest, knowing the future (Belady's rule; optimal for tables of one
    size, a close bound when sizes differ)."""
    asked_at: dict[Hashable, list[int]] = {}
    for i, (key, _) in enumerate(requests):
        asked_at.setdefault(key, []).append(i)

    def next_ask(key: Hashable, i: int) -> int:
        later = asked_at[key][bisect.bisect_right(asked_at[key], i):]
        return later[0] if later else len(requests)

    return _replayed(requests, budget, lambda kept, asked, i: max(kept, key=lambda key: next_ask(key, i)))


def print_table_report(traces: Path, every_hours: float, deadline_hours: float, overhead_hours: float) -> None:
    from spotrun.policy import markov

    seen = table_requests(traces, every_hours, deadline_hours, overhead_hours)
    requests, budget = seen["requests"], markov.TABLE_BYTES_KEPT
    # a run of requests for one table counts once: what each rule counts is how often the policy comes back to it
    changes = [request for i, request in enumerate(requests) if i == 0 or request[0] != requests[i - 1][0]]
    distinct = dict(changes)
    most_asked = Counter(key for key, _ in changes).most_common(1)[0][1]
    print(f"C = 48 h, D = {deadline_hours:g} h, d = {overhead_hours:g} h, starts every {every_hours:g} h; default's "
          f"runs in one process, {len(requests):,} table requests, {len(changes):,} changes of table, "
          f"{len(distinct)} distinct tables ({sum(distinct.values()) / 2**30:.2f} GiB); the table changed to most "
          f"often, {most_asked:,} times\n")
    gib = f"{budget / 2**30:g} GiB"
    rows = [(f"as run: least recently used out, {gib}", seen["computed"])]
    rows += [(f"replayed: least recently used out, {scale * budget / 2**30:g} GiB", misses_lru(changes, scale * budget))
             for scale in (1, 2, 4)]
    rows.append((f"replayed: least often asked out, {gib}", misses_lfu(changes, budget)))
    rows += [(f"replayed: segmented LRU, {share:.0%} protected, {gib}", misses_segmented_lru(changes, budget, share))
             for share in (0.2, 0.5, 0.8)]
    rows.append((f"replayed: asked again latest out (knows the future), {gib}", misses_farthest_next_use(changes, budget)))
    print("| cache | tables computed |")
    print("| --- | --- |")
    for cache, computed in rows:
        print(f"| {cache} | {computed} |")


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
