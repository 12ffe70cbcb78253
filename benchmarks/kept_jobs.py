"""What the reads that every job reaches cost on a team server that has kept every job it ever ran.

    python benchmarks/kept_jobs.py                        # SQLite, 1,000 / 10,000 / 50,000 jobs
    python benchmarks/kept_jobs.py --db postgresql        # a throwaway database on 127.0.0.1:5432
    python benchmarks/kept_jobs.py --jobs 100000          # other sizes

For each size it writes a fresh store in bulk: every job has two refused tries, a spot attempt preempted with a
notice, a replacement whose agent started and that was preempted without one, and an on-demand attempt that
finished (for the newest `RUNNING` jobs, still runs). Then it times, median of `--repeats`:

- `scrape`: the metrics (the registry rendered as Prometheus text, as `GET /metrics` answers), and the totals it
  reported, so that two versions of the code can be compared side by side (run the old one through
  `PYTHONPATH=<its checkout>/src`);
- `all`: `GET /api/v1/jobs`, every job (an admin's token; `spotrun status --all`), through the app in this process;
- `status`: what `spotrun status` and the dashboard's list ask: `GET /api/v1/jobs?ended=false` and
  `?ended=true&limit=21` (code older than those parameters ignores them and sends every job twice);
- `tick`: what a controller worker reads at every tick to know its jobs (`Controller._live_job_ids`: renew its
  claims, claim free jobs not ended, list those it holds), the 20 running jobs already claimed.

The store and the temporary folder are removed at the end.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import insert, text

from long_wait import median_ms  # benchmarks/, beside this script
from server_load import throwaway_database
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.server.app import create_app
from spotrun.server.metrics import StoreCollector
from spotrun.server.users import add_user
from spotrun.state import Attempt, Job, Store

NOW = 1_800_000_000.0
RUNNING = 20  # the newest jobs still run; every older one has ended
CHUNK = 20_000
# (market, placed, agent starts after, ends after, end reason, notice before the end) of each job's attempts
HISTORY = (
    ("spot", False, None, 0.0, "no_capacity", None),
    ("spot", False, None, 0.0, "no_capacity", None),
    ("spot", True, 40.0, 3_600.0, "preempted", 90.0),
    ("spot", True, 35.0, 1_800.0, "preempted", None),
    ("on-demand", True, 30.0, 7_200.0, "succeeded", None),
)


def job_rows(job_id: int, running: bool) -> list[dict]:
    rows, at = [], NOW - 10 * 86_400 + job_id
    for number, (market, placed, agent, lasts, reason, notice) in enumerate(HISTORY, start=1):
        still_running = running and number == len(HISTORY)
        ended = None if still_running else at + lasts
        rows.append(dict(
            job_id=job_id, number=number, state="running" if still_running else "ended", provider="local",
            zone="local-a", market=market, instance_type="local.cpu", price_per_hour=0.97 if market == "spot" else 3.06,
            on_demand_price_per_hour=3.06, client_token=f"scrape-{job_id}-{number}", token_hash="-", created_at=at,
            started_at=at if placed else None, agent_started_at=at + agent if agent is not None else None,
            notice_at=ended - notice if notice is not None and ended is not None else None, ended_at=ended,
            end_reason=None if still_running else reason, billed_seconds=lasts if placed and ended else 0.0,
            log_bytes=0, node_rank=0,
        ))
        at += lasts + 60.0
    return rows


def fill(store: Store, jobs: int) -> int:
    attempts = 0
    with store.session() as session:
        for first in range(1, jobs + 1, CHUNK):
            ids = range(first, min(first + CHUNK, jobs + 1))
            session.execute(insert(Job), [
                dict(id=j, name=f"job-{j}", owner="alice", spec={}, state="RUNNING" if j > jobs - RUNNING else "SUCCEEDED",
                     created_at=NOW - 10 * 86_400, updated_at=NOW) for j in ids
            ])
            rows = [row for j in ids for row in job_rows(j, running=j > jobs - RUNNING)]
            session.execute(insert(Attempt), rows)
            attempts += len(rows)
    if store.engine.dialect.name == "postgresql":
        # a live server's autovacuum analyzes tables as they grow; tables written in bulk have no statistics yet,
        # and the planner then scanned all attempts to read the 41 listed jobs' (EXPLAIN ANALYZE by hand: 54 ms;
        # 0.2 ms after ANALYZE)
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("ANALYZE"))
    return attempts


def measure(db: str, jobs: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="spotrun-kept-") as folder, throwaway_database(db, Path(folder)) as url:
        store = Store(url)
        try:
            attempts = fill(store, jobs)
            collector = StoreCollector(store, clock=lambda: NOW)
            scraped = {}
            scrape_ms = median_ms(lambda: scraped.update(text=render(collector)), repeats)
            worker = Controller(store, ControllerSettings(controller_url="http://unused"), worker_id="bench-worker")
            worker._live_job_ids()  # claims the running jobs, as the worker's first tick does
            tick_ms = median_ms(worker._live_job_ids, repeats)
            token = add_user(store, "admin", NOW, admin=True).token
            status: dict[str, list] = {}
            with TestClient(create_app(store), headers={"Authorization": f"Bearer {token}"}) as client:
                every_ms = median_ms(lambda: listed(client, {}), repeats)
                status_ms = median_ms(lambda: status.update(
                    unended=listed(client, {"ended": "false"}), ended=listed(client, {"ended": "true", "limit": "21"}),
                ), repeats)
            status_rows = len(status["unended"]) + len(status["ended"])
        finally:
            store.dispose()
    return {"attempts": attempts, "ms": scrape_ms, "text": scraped["text"], "all_ms": every_ms,
            "status_ms": status_ms, "status_rows": status_rows, "tick_ms": tick_ms}


def listed(client: TestClient, selection: dict[str, str]) -> list:
    response = client.get("/api/v1/jobs", params=selection)
    response.raise_for_status()
    return response.json()


def render(collector: StoreCollector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def reported(text: str, name: str) -> float:
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, action="append", help="jobs in the store (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.db}, median of {args.repeats}; spotrun from {Path(sys.modules['spotrun'].__file__).parent}")
    print("| jobs | attempts | scrape ms | preemptions | recoveries | recovery s | dollars spent | dollars saved "
          "| all jobs ms | status's lists ms | status's rows | tick's live jobs ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for jobs in args.jobs or [1_000, 10_000, 50_000]:
        m = measure(args.db, jobs, args.repeats)
        text = m["text"]
        print(f"| {jobs:,} | {m['attempts']:,} | {m['ms']:.1f} | {reported(text, 'spotrun_preemptions_total'):,.0f} | "
              f"{reported(text, 'spotrun_recoveries_total'):,.0f} | {reported(text, 'spotrun_recovery_seconds_sum'):,.0f} | "
              f"{reported(text, 'spotrun_dollars_spent'):,.2f} | {reported(text, 'spotrun_dollars_saved'):,.2f} | "
              f"{m['all_ms']:.1f} | {m['status_ms']:.1f} | {m['status_rows']:,} | {m['tick_ms']:.2f} |", flush=True)

if __name__ == "__main__":
    main()
