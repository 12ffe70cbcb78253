"""Jobs waiting for spot in one market: how often they ask the cloud, and how much of the market's history the
tries a placement reads then hold.

    python benchmarks/waiting_jobs.py                       # 1, 10 and 30 jobs, SQLite
    python benchmarks/waiting_jobs.py --jobs 10 --hours 2   # other sizes
    python benchmarks/waiting_jobs.py --db postgresql       # a throwaway database on 127.0.0.1:5432

For each size: that many jobs with `spot: {fallback: wait}`, submitted 7 s apart, in a local-cloud market with no
spot in any of its zones; the real controller ticks every `--tick` seconds of a manual clock. After the first hour
(the jobs' waits grow to `backoff_max`, 5 min), it counts the tries (each a launch call to the cloud and an attempt
row) made in the next `--hours`: per hour, per zone and hour, the longest any zone went unasked, and how many hours
the newest `market_history_tries` (20,000) of them span, which is the market history a placement reads. Then it
makes spot come back in one zone and times how long until a job runs there, and until every job does. Prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from sqlalchemy import func, select

from server_load import throwaway_database  # benchmarks/, beside this script
from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.providers.local import LocalProvider, TraceMarket, set_market
from spotrun.providers.local.provider import DEFAULT_QUOTA
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Store

JOB = """
name: waiting
run: "true"
resources: {cloud: local, instance_type: local.cpu}
spot: {fallback: wait}
"""
HOUR = 3600.0


def measure(db: str, count: int, hours: float, tick: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="spotrun-waiting-") as folder, throwaway_database(db, Path(folder)) as url:
        cloud = Path(folder) / "local-cloud"
        set_market(cloud, TraceMarket(traces={}, start_epoch=time.time()))  # no spot in any zone
        store = Store(url)
        try:
            clock = ManualClock(time.time() - 30 * 86400)
            # a quota for every job at once: when spot is back, what is timed is the jobs finding it, not the quota
            quota = max(count, DEFAULT_QUOTA)
            controller = Controller(store, ControllerSettings(controller_url="http://unused"), clock=clock,
                                    provider_factory=lambda _: LocalProvider(cloud, quota=quota))
            for _ in range(count):
                jobs.submit(store, parse_spec(JOB), clock.now())
                clock.advance(7.0)
            run(controller, clock, HOUR, tick)
            since = clock.now()
            run(controller, clock, hours * HOUR, tick)
            found = counted(store, since, clock.now(), hours, controller.settings.market_history_tries)
            found["spot back, s"], found["all running, s"] = spot_back(controller, clock, store, cloud, tick, count)
            return found
        finally:
            store.dispose()
            terminate_all(LocalProvider(cloud))


def run(controller: Controller, clock: ManualClock, seconds: float, tick: float) -> None:
    for _ in range(round(seconds / tick)):
        clock.advance(tick)
        controller.tick()


def counted(store: Store, since: float, until: float, hours: float, history_tries: int) -> dict[str, float]:
    with store.session() as session:
        rows = session.execute(
            select(Attempt.zone, Attempt.created_at).where(Attempt.created_at >= since).order_by(Attempt.created_at)
        ).all()
    by_zone: dict[str, list[float]] = defaultdict(list)
    for zone, at in rows:
        by_zone[zone].append(at)
    unasked = max(max(b - a for a, b in zip([since, *times], [*times, until])) for times in by_zone.values())
    per_hour = len(rows) / hours
    return {
        "tries per hour": per_hour,
        "per zone and hour": per_hour / len(by_zone),
        "longest unasked, s": unasked,
        "hours in 20,000 tries": history_tries / per_hour,
    }


def spot_back(
    controller: Controller, clock: ManualClock, store: Store, cloud: Path, tick: float, count: int
) -> tuple[float, float]:
    """Seconds from spot's return in one zone until some job has an instance there, and until every job has."""
    zone = LocalProvider(cloud).zones("local.cpu")[0]
    trace = cloud.parent / "always.json"
    trace.write_text('{"metadata": {"gap_seconds": 600}, "data": [1, 1]}')
    set_market(cloud, TraceMarket(traces={zone: str(trace)}, start_epoch=time.time()))
    back = clock.now()
    first = float("inf")
    while True:
        running = started(store, back)
        if running and first == float("inf"):
            first = clock.now() - back
        if running >= count:
            return first, clock.now() - back
        if clock.now() - back > 2 * HOUR:
            return first, float("inf")
        run(controller, clock, tick, tick)


def terminate_all(provider: LocalProvider) -> None:
    """The instance the returning spot gave a job: its process writes in the folder about to be removed."""
    for instance in provider.list_instances():
        provider.terminate(instance.instance_id)


def started(store: Store, since: float) -> int:
    """How many jobs got an instance since `since`."""
    with store.session() as session:
        return session.scalar(select(func.count(Attempt.job_id.distinct())).where(Attempt.started_at >= since))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, action="append", help="jobs waiting (repeatable; default 1, 10, 30)")
    parser.add_argument("--hours", type=float, default=3.0, help="hours counted, after the first")
    parser.add_argument("--tick", type=float, default=10.0, help="seconds between two controller ticks")
    args = parser.parse_args()
    print(f"{args.db}, {args.hours:g} h counted after the first, a tick every {args.tick:g} s; {sys.executable}")
    columns = ("tries per hour", "per zone and hour", "longest unasked, s", "hours in 20,000 tries", "spot back, s",
               "all running, s")
    print("| jobs waiting | " + " | ".join(columns) + " |")
    print("| ---: |" + " ---: |" * len(columns))
    for count in args.jobs or [1, 10, 30]:
        found = measure(args.db, count, args.hours, args.tick)
        print(f"| {count} | " + " | ".join(f"{found[c]:,.1f}" for c in columns) + " |", flush=True)


if __name__ == "__main__":
    main()
