"""A job that waits a long time for spot: what its refused tries cost the controller and the readers.

    python benchmarks/long_wait.py                          # SQLite, 0 / 1,000 / 4,000 / 8,000 refused tries
    python benchmarks/long_wait.py --db postgresql          # a throwaway database on 127.0.0.1:5432
    python benchmarks/long_wait.py --tries 0 --tries 20000  # other sizes
    python benchmarks/long_wait.py --market-tries 0 --market-tries 400000  # other jobs' tries in the market

A job with `spot: {fallback: wait}` in a market without spot is refused at every try, and every try is an attempt row
with its events (a job without a deadline retries every zone at least every `backoff_max`, 5 min: ~860 tries a day).
For each size the benchmark makes a fresh store and one such job, lets the real controller (local cloud, a market
with no spot anywhere, a manual clock) make one round of tries, copies that round's rows (attempts and events, each
copy 15 min after the one before) until the job has the size's number of tries, and then times, median of
`--repeats`:

- `placement`: one controller drive that places the job and is refused (each adds one try);
- `list`: the rows of `spotrun status` (every job, here one);
- `detail`: `spotrun status JOB`'s job with all its attempts, and the size of its JSON;
- `events`: the job's events from the first;
- the page refresh's detail: what the dashboard's job page asks at each refresh once it holds the job's ended tries
  without an instance (`GET /jobs/{id}?settled_below=N`), and the size of its JSON.

With `--market-tries N` it measures, instead, a placement of a job with a few tries of its own in a market where
other jobs have N refused tries over the last 13 days (written in bulk): as the controller reads them (the newest
`market_history_tries`, 20,000) and all of them.

Prints a Markdown table. The store and the temporary home are removed at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, insert, select

from server_load import throwaway_database  # benchmarks/, beside this script
from spotrun.cli.embedded import EmbeddedBackend
from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.providers.local import LocalProvider, TraceMarket, set_market
from spotrun.server.views import JobDetail, job_detail
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Event, Job, Store

JOB = """
name: long-wait
run: "true"
resources: {cloud: local, instance_type: local.cpu}
spot: {fallback: wait}
"""


def median_ms(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


@contextmanager
def waiting_job(db: str) -> Iterator[tuple[Store, ManualClock, Controller, int]]:
    """A fresh store with one job refused spot once in each zone by the real controller."""
    with tempfile.TemporaryDirectory(prefix="spotrun-wait-") as folder, throwaway_database(db, Path(folder)) as url:
        home = Path(folder)
        set_market(home / "local-cloud", TraceMarket(traces={}, start_epoch=time.time()))  # no spot in any zone
        store = Store(url)
        clock = ManualClock(time.time() - 30 * 86400)
        settings = ControllerSettings(controller_url="http://unused")
        controller = Controller(store, settings, clock=clock, provider_factory=lambda _: LocalProvider(home / "local-cloud"))
        job_id = jobs.submit(store, parse_spec(JOB), clock.now())
        for _ in range(3):
            place_once(clock, controller, job_id)
        try:
            yield store, clock, controller, job_id
        finally:
            store.dispose()


def place_once(clock: ManualClock, controller: Controller, job_id: int) -> None:
    clock.advance(controller.settings.backoff_max + 1)
    controller.drive(job_id)


def measure_market(db: str, market_tries: int, repeats: int) -> dict[str, float]:
    with waiting_job(db) as (store, clock, controller, job_id):
        add_market_tries(store, market_tries, until=clock.now())
        capped = median_ms(lambda: place_once(clock, controller, job_id), repeats)
        controller.settings.market_history_tries = 10**12
        return {"capped": capped, "all": median_ms(lambda: place_once(clock, controller, job_id), repeats)}


def add_market_tries(store: Store, count: int, until: float) -> None:
    """Another job with `count` tries refused spot, spread over the 13 days before `until`, written in bulk."""
    other = jobs.submit(store, parse_spec(JOB), until - 13 * 86400)
    start, spacing = until - 13 * 86400, 13 * 86400 / max(count, 1)
    rows = [
        dict(job_id=other, number=n + 1, state="ended", provider="local", zone=f"local-{'abc'[n % 3]}", market="spot",
             instance_type="local.cpu", price_per_hour=0.95, on_demand_price_per_hour=3.06,
             client_token=f"market-{other}-{n}", token_hash="-", created_at=start + n * spacing,
             ended_at=start + n * spacing, end_reason="no_capacity", billed_seconds=0.0, log_bytes=0, node_rank=0)
        for n in range(count)
    ]
    with store.session() as session:
        for chunk in range(0, len(rows), 20_000):
            session.execute(insert(Attempt), rows[chunk:chunk + 20_000])


def measure(db: str, tries: int, repeats: int) -> dict[str, float]:
    with waiting_job(db) as (store, clock, controller, job_id):
        clock.advance(copy_round(store, job_id, tries))
        backend = EmbeddedBackend(store)
        found = {
            "placement": median_ms(lambda: place_once(clock, controller, job_id), repeats),
            "list": median_ms(backend.rows, repeats),
            "detail": median_ms(lambda: backend.detail(job_id), repeats),
            "events": median_ms(lambda: backend.events(job_id, 0), repeats),
            "refresh": median_ms(lambda: settled_detail(store, job_id), repeats),
        }
        detail = backend.detail(job_id)
        found["attempts"] = len(detail.attempts)
        found["events_count"] = len(backend.events(job_id, 0))
        found["detail_kb"] = len(detail.model_dump_json()) / 1024
        found["refresh_kb"] = len(settled_detail(store, job_id).model_dump_json()) / 1024
        return found


def settled_detail(store: Store, job_id: int) -> JobDetail:
    """The detail as the dashboard's job page asks for it once it holds the job's ended tries without an instance."""
    with store.session() as session:
        job = session.get(Job, job_id)
        newest = session.scalar(select(func.max(Attempt.number)).where(Attempt.job_id == job_id))
        return job_detail(session, job, time.time(), settled_below=newest)


def copy_round(store: Store, job_id: int, tries: int) -> float:
    """Copies the job's tries so far (and their events) until it has `tries` of them, each copy 15 min after the
    one before; returns the seconds the copies span."""
    columns = [c.key for c in Attempt.__table__.columns if c.key not in ("id",)]
    event_columns = [c.key for c in Event.__table__.columns if c.key not in ("id",)]
    with store.session() as session:
        round_ = list(session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)))
        events = list(session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id)))[1:]  # not "submitted"
        span = 900.0
        copies = max(0, (tries - len(round_)) // len(round_))
        number = max(a.number for a in round_)
        for copy in range(1, copies + 1):
            shift = span * copy
            clones = {}
            for attempt in round_:
                fields = {key: getattr(attempt, key) for key in columns}
                number += 1
                fields.update(number=number, client_token=f"copy-{uuid.uuid4().hex}")
                for key in ("created_at", "started_at", "ended_at", "notice_at"):
                    if fields.get(key) is not None:
                        fields[key] += shift
                clones[attempt.id] = Attempt(**fields)
                session.add(clones[attempt.id])
            session.flush()
            for event in events:
                values = {key: getattr(event, key) for key in event_columns}
                clone = clones.get(event.attempt_id)
                values.update(attempt_id=clone.id if clone else None, at=event.at + shift)
                session.add(Event(**values))
        return span * copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--tries", type=int, action="append", help="refused tries before measuring (repeatable)")
    parser.add_argument("--market-tries", type=int, action="append", help="other jobs' tries in the market (repeatable)")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    if args.market_tries:
        print(f"{args.db}, median of {args.repeats}; {sys.executable}")
        print("| other jobs' tries in the market | placement ms, reading the newest 20,000 | placement ms, reading all |")
        print("| ---: | ---: | ---: |")
        for count in args.market_tries:
            m = measure_market(args.db, count, args.repeats)
            print(f"| {count:,} | {m['capped']:.1f} | {m['all']:.1f} |", flush=True)
        return
    sizes = args.tries or [0, 1000, 4000, 8000]
    print(f"{args.db}, median of {args.repeats}; {sys.executable}")
    print("| refused tries | attempts | events | placement ms | list ms | detail ms | detail JSON KB | events ms "
          "| page refresh's detail ms | its JSON KB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in sizes:
        m = measure(args.db, size, args.repeats)
        print(f"| {size:,} | {m['attempts']:,} | {m['events_count']:,} | {m['placement']:.1f} | {m['list']:.1f} | "
              f"{m['detail']:.1f} | {m['detail_kb']:,.0f} | {m['events']:.1f} | {m['refresh']:.1f} | "
              f"{m['refresh_kb']:,.1f} |", flush=True)


if __name__ == "__main__":
    main()
