"""Read-only views of jobs for the CLI: rows for `status`, the bill for `cost`, the follow display."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from spotrun.control import jobs as jobs_api
from spotrun.control.states import is_terminal
from spotrun.costs.ledger import JobBill, bill
from spotrun.state import Job, Store


@dataclass(frozen=True)
class JobRow:
    id: int
    name: str
    state: str
    attempts: int
    preemptions: int
    market: str | None
    zone: str | None
    elapsed: float
    cost: float
    checkpoint_step: int | None
    failure_reason: str | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def job_row(job: Job, now: float) -> JobRow:
    placed = [a for a in job.attempts if a.started_at is not None]
    current = placed[-1] if placed and not is_terminal(job.state) else None
    steps = [a.checkpoint_step for a in job.attempts if a.checkpoint_step is not None]
    return JobRow(
        id=job.id,
        name=job.name,
        state=job.state,
        attempts=len(placed),
        preemptions=job.preemptions,
        market=current.market if current and current.ended_at is None else None,
        zone=current.zone if current and current.ended_at is None else None,
        elapsed=(job.finished_at or now) - job.created_at,
        cost=bill(job.attempts, now).cost,
        checkpoint_step=max(steps) if steps else None,
        failure_reason=job.failure_reason,
    )


def job_rows(store: Store, now: float, job_id: int | None = None) -> list[JobRow]:
    with store.session() as session:
        found = [jobs_api.get_job(session, job_id)] if job_id is not None else jobs_api.list_jobs(session)
        return [job_row(job, now) for job in found]


def job_bill(store: Store, job_id: int, now: float) -> tuple[Job, JobBill]:
    with store.session() as session:
        job = jobs_api.get_job(session, job_id)
        return job, bill(job.attempts, now)


_STATE_STYLE = {
    "SUCCEEDED": "green", "FAILED": "red", "CANCELLED": "yellow", "PREEMPTED": "magenta",
    "WAITING": "yellow", "RUNNING": "cyan", "PROVISIONING": "blue", "PENDING": "white",
}


def status_table(rows: list[JobRow]) -> Table:
    table = Table(title="spotrun jobs")
    for column in ("id", "name", "state", "attempts", "preemptions", "market/zone", "elapsed", "cost so far"):
        table.add_column(column, justify="right" if column in ("id", "attempts", "preemptions", "elapsed") else "left")
    for row in rows:
        where = f"{row.market} / {row.zone}" if row.market else "—"
        table.add_row(
            str(row.id), row.name, f"[{_STATE_STYLE.get(row.state, 'white')}]{row.state}[/]", str(row.attempts),
            str(row.preemptions), where, format_duration(row.elapsed), f"${row.cost:.4f}",
        )
    return table


def attempts_table(store: Store, job_id: int, now: float) -> Table:
    table = Table(title=f"attempts of job {job_id}")
    for column in ("#", "market", "zone", "instance", "started", "ended", "end", "billed s", "$/h"):
        table.add_column(column)
    with store.session() as session:
        for a in jobs_api.job_attempts(session, job_id):
            table.add_row(
                str(a.number), a.market, a.zone, a.instance_id or "—", clock_time(a.started_at),
                clock_time(a.ended_at), a.end_reason or a.state,
                f"{a.billed_seconds if a.ended_at else max(now - (a.started_at or now), 0):.0f}", f"{a.price_per_hour:.4f}",
            )
    return table


def follow_events(store: Store, job_id: int, console: Console, poll: float = 0.3) -> str:
    """Print the job's events as they happen, under a live status line, until it ends; returns its final state."""
    last_event = 0
    with Live(console=console, auto_refresh=False, transient=True) as live:
        while True:
            with store.session() as session:
                job = jobs_api.get_job(session, job_id)
                events = jobs_api.job_events(session, job_id, after_id=last_event)
                row = job_row(job, time.time())
            for event in events:
                live.console.print(f"[dim]{clock_time(event.at)}[/] {_event_text(event.kind, event.message)}")
                last_event = event.id
            if is_terminal(row.state):
                return row.state
            live.update(progress_line(row), refresh=True)
            time.sleep(poll)


def progress_line(row: JobRow) -> Text:
    where = f"{row.market} in {row.zone}" if row.market else "no instance"
    step = f"checkpoint step {row.checkpoint_step}" if row.checkpoint_step is not None else "no checkpoint yet"
    return Text.from_markup(
        f"[bold]job {row.id}[/] [{_STATE_STYLE.get(row.state, 'white')}]{row.state}[/] · attempt {row.attempts} · "
        f"{where} · {row.preemptions} preemptions · {step} · {format_duration(row.elapsed)} · ${row.cost:.4f} so far"
    )


def _event_text(kind: str, message: str) -> str:
    styles = {"preemption_notice": "bold magenta", "state": "bold", "launch_refused": "yellow", "chaos": "magenta"}
    style = styles.get(kind)
    return f"[{style}]{message}[/]" if style else message


def clock_time(at: float | None) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S") if at else "—"


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
