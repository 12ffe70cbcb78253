"""Helpers of the dashboard tests: the server in a thread on a free loopback port, a job with a preemption history,
and the headless Chromium that Debian ships (driven by Playwright, never a downloaded browser)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn
from sqlalchemy import select

from spotrun.control.logs import append_chunk
from spotrun.control.tokens import hash_token
from spotrun.state import Attempt, Job, Store

CHROMIUM = os.environ.get("SPOTRUN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]
INSTALL_HINT = "apt-get update && apt-get install -y chromium; pip install playwright (never `playwright install`)"


def chromium_path() -> str | None:
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")


class LiveServer:
    """The app served by uvicorn in a thread, on 127.0.0.1 at a free port, until the block ends."""

    def __init__(self, app: Any) -> None:  # any ASGI app
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        # log_config=None: uvicorn's access records reach the root logger, where a test can read them.
        self._server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="info"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the dashboard's server did not start within 10 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()


class PageErrors:
    """Script errors and failed requests of a page, and every URL it asked for."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.urls: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("console", lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None)
        page.on("request", lambda request: self.urls.append(request.url))


@dataclass(frozen=True)
class Dashboard:
    url: str
    store: Store
    tokens: dict[str, str]
    finished_job: int  # alice's, preempted twice, then succeeded on-demand
    running_job: int  # alice's
    bobs_job: int


VIEWPORT = {"width": 1280, "height": 900}


def job_page(browser: Any, dashboard: Dashboard, user: str, job_id: int) -> Any:
    """A new page, logged in as `user`, on the job's page."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    log_in_to_job_page(page, dashboard, user, job_id)
    return page


def log_in_to_job_page(page: Any, dashboard: Dashboard, user: str, job_id: int) -> None:
    """Log `page` in as `user` through the login form, then go to the job's page."""
    page.goto(f"{dashboard.url}/dashboard/login")
    page.fill("#token", dashboard.tokens[user])
    page.click("button[type=submit]")
    page.wait_for_url(f"{dashboard.url}/dashboard/")
    page.goto(f"{dashboard.url}/dashboard/jobs/{job_id}")


def next_poll(page: Any, asks_for: str) -> None:
    """Bring the page's next poll forward rather than wait POLL_MS (3 s) for it, on a page whose clock Playwright
    installed (`page.clock.install()`, before the page loads): jump the page's clock by POLL_MS until the page asks for
    a URL containing `asks_for` (a poll is set only once the previous one has ended, and a jump before that moves the
    clock and nothing else)."""
    poll_ms = page.evaluate("async () => (await import('/dashboard/static/api.js')).POLL_MS")
    asked: list[str] = []

    def on_request(request: Any) -> None:
        if asks_for in request.url:
            asked.append(request.url)

    page.on("request", on_request)
    try:
        deadline = time.monotonic() + 30
        while not asked:
            assert time.monotonic() < deadline, f"the page did not poll {asks_for} again"
            page.clock.fast_forward(poll_ms)
            page.wait_for_timeout(100)
    finally:
        page.remove_listener("request", on_request)


@dataclass(frozen=True)
class PlannedAttempt:
    market: str
    zone: str
    start: float  # seconds after the job was submitted
    end: float
    end_reason: str
    price_per_hour: float
    checkpoint_step: int | None
    log: str
    charged_seconds: float | None = None  # None: as billed
    warning: str | None = None  # the early warning its agent reported, "<source>/<kind>"


ON_DEMAND_PRICE = 0.40
# Spot in local-a, preempted; a try without capacity; spot in local-b, preempted; on-demand in local-a, succeeded.
PREEMPTED_HISTORY = (
    # reclaimed by the cloud in its first hour: EC2 charges nothing for it
    PlannedAttempt("spot", "local-a", 0, 1200, "preempted", 0.12, 400, "epoch 1 loss 2.30\nstep 400 saved\n", 0.0),
    PlannedAttempt("spot", "local-b", 1500, 2400, "preempted", 0.10, 700, "resumed at step 400\nstep 700 saved\n",
                   warning="aws-imds/rebalance"),  # EC2 recommended leaving it, and then took it
    PlannedAttempt("on-demand", "local-a", 2520, 3300, "succeeded", ON_DEMAND_PRICE, 1000, "resumed at step 700\ndone ✓\n"),
)
NO_CAPACITY_AT = 1250.0  # the try between the first two attempts
TOTAL_STEPS = 1250  # of the whole run, as the SDK reported it


def seed_preempted_job(store: Store, owner: str, submitted_at: float, name: str = "resnet") -> int:
    """A finished job whose attempts follow PREEMPTED_HISTORY, with each placed attempt's log in the store."""
    with store.session() as session:
        job = Job(
            name=name, owner=owner, spec={"name": name, "run": "train"}, state="SUCCEEDED", created_at=submitted_at,
            updated_at=submitted_at + 3300, finished_at=submitted_at + 3300, preemptions=2,
        )
        session.add(job)
        session.flush()
        placed = [_placed_attempt(job.id, plan, submitted_at) for plan in PREEMPTED_HISTORY]
        unplaced = refused_try(job.id, 0, "local-a", submitted_at + NO_CAPACITY_AT)  # numbered below
        for number, attempt in enumerate([placed[0], unplaced, *placed[1:]], start=1):
            attempt.number = number
            session.add(attempt)
        job_id = job.id
    with store.session() as session:
        ids = {a.number: a.id for a in session.scalars(select(Attempt).where(Attempt.job_id == job_id))}
        for number, plan in zip((1, 3, 4), PREEMPTED_HISTORY, strict=True):
            append_chunk(session, ids[number], 0, plan.log.encode())
    return job_id


def refused_try(job_id: int, number: int, zone: str, at: float) -> Attempt:
    """A spot launch try refused for capacity at `at`, as the controller records it: no instance, nothing billed."""
    return Attempt(
        job_id=job_id, number=number, state="ended", provider="local", zone=zone, market="spot",
        instance_type="local.cpu", price_per_hour=0.12, on_demand_price_per_hour=ON_DEMAND_PRICE,
        client_token=f"ct-{job_id}-refused-{number}-{at}", token_hash=hash_token(f"agent-{job_id}-refused-{at}"),
        created_at=at, ended_at=at, end_reason="no_capacity", billed_seconds=0.0,
    )


def _placed_attempt(job_id: int, plan: PlannedAttempt, submitted_at: float) -> Attempt:
    started, ended = submitted_at + plan.start, submitted_at + plan.end
    return Attempt(
        job_id=job_id, state="ended", provider="local", zone=plan.zone, market=plan.market,
        instance_type="local.cpu", price_per_hour=plan.price_per_hour, on_demand_price_per_hour=ON_DEMAND_PRICE,
        client_token=f"ct-{job_id}-{plan.start}", token_hash=hash_token(f"agent-{job_id}-{plan.start}"),
        instance_id=f"li-{job_id}-{int(plan.start)}", created_at=started, started_at=started,
        agent_started_at=started + 2, notice_at=ended - 30 if plan.end_reason == "preempted" else None,
        ended_at=ended, end_reason=plan.end_reason, billed_seconds=plan.end - plan.start,
        charged_seconds=plan.charged_seconds,
        warned_at=started + 600 if plan.warning else None, warning=plan.warning,
        checkpoint_step=plan.checkpoint_step, total_steps=TOTAL_STEPS, log_bytes=0,  # its log is appended below
    )


def seed_running_job(store: Store, owner: str, name: str, now: float) -> int:
    """A job running on a spot instance in local-c since a minute ago."""
    with store.session() as session:
        job = Job(name=name, owner=owner, spec={"name": name, "run": "train"}, state="RUNNING",
                  created_at=now - 60, updated_at=now)
        session.add(job)
        session.flush()
        session.add(Attempt(
            job_id=job.id, number=1, state="running", provider="local", zone="local-c", market="spot",
            instance_type="local.cpu", price_per_hour=0.1, on_demand_price_per_hour=ON_DEMAND_PRICE,
            client_token=f"ct-{job.id}-1", token_hash=hash_token(f"agent-{job.id}-1"), instance_id=f"li-{job.id}-1",
            created_at=now - 60, started_at=now - 55,
        ))
        return job.id


def set_job_state(store: Store, job_id: int, state: str) -> None:
    with store.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.state = state
