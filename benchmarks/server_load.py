"""Team-server load benchmark: 1,000 jobs submitted through the HTTP API while other clients poll, on loopback.

    python benchmarks/server_load.py                      # PostgreSQL at 127.0.0.1:5432, a throwaway database
    python benchmarks/server_load.py --db sqlite          # SQLite in a temporary SPOTRUN_HOME
    python benchmarks/server_load.py --no-controller      # the API alone

It starts `spotrun server` (a child process, port 0) over a fresh store with users, then runs client threads,
each with its own keep-alive httpx client:

- submitters POST /api/v1/jobs until `--jobs` jobs are in (a shared counter: exactly that many requests);
- pollers each do `--polls` rounds of GET /api/v1/jobs, GET /api/v1/jobs/{id} and GET /api/v1/jobs/{id}/events
  (a random job already submitted; the admin poller sees everyone's), and every 10th round GET /metrics.

The jobs run on the local cloud with `spot: {fallback: wait}` under a market with no spot capacity in any zone, so
the server's controller really drives all of them (placement tries, backoff, a no_capacity attempt per try) while
the API is under load, yet no instance (process) is ever started. `--no-controller` measures the API alone.

Bounded: fixed request counts, and `--time-limit` seconds after which the clients stop and the run is reported as
incomplete (exit 1). Prints p50/p99/max latency and errors per endpoint as a Markdown table (and `--json` writes
the numbers); exits 1 on any error. The database, the temporary home and the server are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from spotrun.providers.local import TraceMarket, set_market
from spotrun.server.users import add_user
from spotrun.state import Attempt, Job, Store

POSTGRES_SERVER = "host=127.0.0.1 port=5432 user=postgres"
POSTGRES_ADMIN_DB = "test"
USERS = ("alice", "bob", "carol", "dave")
JOB_TEMPLATE = """
name: load-{number}
run: "true"
resources: {{cloud: local, instance_type: local.cpu}}
spot: {{fallback: wait}}
"""


@dataclass
class Recorder:
    """Latencies (seconds) and errors per endpoint, shared by the client threads."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    examples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, endpoint: str, request: Callable[[], httpx.Response], expected: int = 200) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response: httpx.Response | None = request()
            problem = None if response.status_code == expected else f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as error:
            response, problem = None, f"{type(error).__name__}: {error}"
        elapsed = time.perf_counter() - started
        with self.lock:
            self.latencies[endpoint].append(elapsed)
            if problem is not None:
                self.errors[endpoint] += 1
                if len(self.examples) < 10:
                    self.examples.append(f"{endpoint}: {problem}")
        return response if problem is None else None


@dataclass
class Plan:
    jobs: int
    submitters: int
    pollers: int
    polls: int
    deadline: float  # time.monotonic() after which no client sends another request


class Submitted:
    """The jobs submitted so far: the next number to submit, and the ids (for the pollers to read)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.ids: list[int] = []
        self._next = 0
        self._lock = threading.Lock()

    def take_number(self) -> int | None:
        with self._lock:
            if self._next >= self.total:
                return None
            self._next += 1
            return self._next

    def add(self, job_id: int) -> None:
        with self._lock:
            self.ids.append(job_id)

    def any_id(self) -> int | None:
        with self._lock:
            return random.choice(self.ids) if self.ids else None


def submitter(url: str, token: str, submitted: Submitted, recorder: Recorder, deadline: float) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        while time.monotonic() < deadline and (number := submitted.take_number()) is not None:
            body = {"spec": JOB_TEMPLATE.format(number=number)}
            response = recorder.call("POST /api/v1/jobs", lambda: client.post("/api/v1/jobs", json=body), expected=201)
            if response is not None:
                submitted.add(response.json()["id"])


def poller(url: str, token: str, scrape_metrics: bool, submitted: Submitted, recorder: Recorder, plan: Plan) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        for round_number in range(plan.polls):
            if time.monotonic() >= plan.deadline:
                return
            recorder.call("GET /api/v1/jobs", lambda: client.get("/api/v1/jobs"))
            job_id = submitted.any_id()
            if job_id is not None:
                recorder.call("GET /api/v1/jobs/{id}", lambda: client.get(f"/api/v1/jobs/{job_id}"))
                recorder.call("GET /api/v1/jobs/{id}/events", lambda: client.get(f"/api/v1/jobs/{job_id}/events"))
            if scrape_metrics and round_number % 10 == 0:
                recorder.call("GET /metrics", lambda: client.get("/metrics"))


def run_clients(url: str, tokens: dict[str, str], plan: Plan, recorder: Recorder) -> tuple[Submitted, float]:
    """Runs the submitters and pollers to completion (or the deadline); returns what was submitted and the wall time."""
    submitted = Submitted(plan.jobs)
    threads = [
        threading.Thread(target=submitter, args=(url, tokens[USERS[i % len(USERS)]], submitted, recorder, plan.deadline))
        for i in range(plan.submitters)
    ]
    # Pollers act as the admin (all jobs, so every id it picks is visible to it); the first also scrapes /metrics.
    threads += [
        threading.Thread(target=poller, args=(url, tokens["admin"], i == 0, submitted, recorder, plan))
        for i in range(plan.pollers)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return submitted, time.perf_counter() - started


# -- the store and the server --------------------------------------------------------------------------------------

@contextmanager
def throwaway_database(kind: str, home: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{home / 'state.db'}"
        return
    name = f"spotrun_load_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{POSTGRES_SERVER} dbname={POSTGRES_ADMIN_DB}", autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(f"{POSTGRES_SERVER} dbname={POSTGRES_ADMIN_DB}", autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def prepare_store(url: str, home: Path) -> dict[str, str]:
    """Migrates the store, adds the users (and an admin), and sets a local market without spot capacity."""
    store = Store(url)
    try:
        now = time.time()
        tokens = {name: add_user(store, name, now).token for name in USERS}
        tokens["admin"] = add_user(store, "admin", now, admin=True).token
    finally:
        store.dispose()
    set_market(home / "local-cloud", TraceMarket(traces={}, start_epoch=time.time()))  # no zone has a trace
    return tokens


@contextmanager
def running_server(url: str, home: Path, controller: bool, time_limit: float) -> Iterator[str]:
    command = [sys.executable, "-m", "spotrun.cli.main", "server", "--port", "0", "--database-url", url]
    if not controller:
        command.append("--no-controller")
    # the users' jobs run on the local cloud, which a server allows only when told to
    env = {**os.environ, "SPOTRUN_HOME": str(home), "PYTHONUNBUFFERED": "1", "SPOTRUN_SERVER_LOCAL_CLOUD": "all"}
    log_path = home / "server.log"
    # Everything the server prints goes to a file: a pipe nobody reads would fill up and stall the server.
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield _listening_url(process, log_path, deadline=time.monotonic() + min(time_limit, 60))
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _listening_url(process: subprocess.Popen[bytes], log_path: Path, deadline: float) -> str:
    marker = re.compile(r"^spotrun server listening on (\S+)$", re.MULTILINE)
    while time.monotonic() < deadline and process.poll() is None:
        found = marker.search(log_path.read_text(errors="replace"))
        if found:
            try:
                if httpx.get(f"{found[1]}/healthz", timeout=2).status_code == 200:
                    return found[1]
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the server did not come up (exit code {process.poll()}); its log ends:\n{tail}")


def controller_activity(url: str) -> dict[str, int]:
    """What the controller did to the jobs: states, no-capacity tries, instances started (must be 0)."""
    store = Store(url, migrate=False)
    try:
        with store.session() as session:
            states: dict[str, int] = defaultdict(int)
            for job in session.query(Job):
                states[job.state] += 1
            tries = session.query(Attempt).filter(Attempt.end_reason == "no_capacity").count()
            started = session.query(Attempt).filter(Attempt.started_at.is_not(None)).count()
        return {**{f"jobs {state}": count for state, count in sorted(states.items())},
                "no_capacity attempts": tries, "attempts that got an instance": started}
    finally:
        store.dispose()


# -- the report ----------------------------------------------------------------------------------------------------

def machine_facts(db: str, url: str) -> dict[str, str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    facts = {
        "cpus": str(os.cpu_count()), "cpu": cpu, "python": platform.python_version(),
        "os": platform.platform(),
    }
    if db == "sqlite":
        facts["database"] = f"SQLite {sqlite3.sqlite_version}"
    else:
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as connection:
            version = connection.execute("SHOW server_version").fetchone()
        facts["database"] = f"PostgreSQL {version[0] if version else '?'} on 127.0.0.1"
    return facts


def percentile(samples: list[float], fraction: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[round(fraction * 100) - 1] if len(samples) > 1 \
        else samples[0]


def latency_table(recorder: Recorder) -> list[dict[str, float | int | str]]:
    return [
        {
            "endpoint": endpoint, "requests": len(samples), "errors": recorder.errors.get(endpoint, 0),
            "p50_ms": percentile(samples, 0.50) * 1000, "p99_ms": percentile(samples, 0.99) * 1000,
            "max_ms": max(samples) * 1000,
        }
        for endpoint, samples in sorted(recorder.latencies.items())
    ]


def print_report(rows: list[dict[str, float | int | str]], summary: dict[str, object]) -> None:
    print("| endpoint | requests | errors | p50 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| `{row['endpoint']}` | {row['requests']} | {row['errors']} | {row['p50_ms']:.1f} | "
              f"{row['p99_ms']:.1f} | {row['max_ms']:.1f} |")
    print()
    for key, value in summary.items():
        print(f"- {key}: {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs to submit (default 1000)")
    parser.add_argument("--submitters", type=int, default=4, help="submitting client threads (default 4)")
    parser.add_argument("--pollers", type=int, default=2, help="polling client threads (default 2)")
    parser.add_argument("--polls", type=int, default=100, help="rounds per poller (default 100)")
    parser.add_argument("--no-controller", action="store_true", help="serve the API only (no controller thread)")
    parser.add_argument("--time-limit", type=float, default=600, help="seconds before the clients stop (default 600)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    for name in ("jobs", "submitters", "pollers", "polls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")

    home = Path(tempfile.mkdtemp(prefix="spotrun-load-"))
    try:
        with throwaway_database(args.db, home) as url:
            tokens = prepare_store(url, home)
            facts = machine_facts(args.db, url)
            with running_server(url, home, controller=not args.no_controller, time_limit=args.time_limit) as server:
                plan = Plan(args.jobs, args.submitters, args.pollers, args.polls,
                            deadline=time.monotonic() + args.time_limit)
                recorder = Recorder()
                submitted, wall = run_clients(server, tokens, plan, recorder)
                listed = httpx.get(f"{server}/api/v1/jobs", headers={"Authorization": f"Bearer {tokens['admin']}"},
                                   timeout=120).json()
            activity = controller_activity(url)
    finally:
        shutil.rmtree(home, ignore_errors=True)

    rows = latency_table(recorder)
    errors = sum(recorder.errors.values())
    complete = len(submitted.ids) == args.jobs and time.monotonic() < plan.deadline
    summary: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/server_load.py", *(argv if argv is not None else sys.argv[1:])]),
        "controller": "off" if args.no_controller else "on (local cloud, no spot capacity, fallback: wait)",
        "clients": f"{args.submitters} submitters, {args.pollers} pollers x {args.polls} rounds",
        "jobs submitted": len(submitted.ids), "jobs the server lists": len(listed),
        "wall seconds": round(wall, 1), "submissions per second": round(len(submitted.ids) / wall, 1),
        "errors": errors, "complete": complete, **activity, **facts,
    }
    print_report(rows, summary)
    for example in recorder.examples:
        print(f"  error: {example}")
    if args.json:
        args.json.write_text(json.dumps({"endpoints": rows, "summary": summary}, indent=2))
    return 0 if complete and errors == 0 and len(listed) == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
