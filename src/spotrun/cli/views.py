"""How the CLI shows jobs: the `status` tables and the follow display (the rows themselves: spotrun.server.views)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from spotrun.control.states import is_terminal
from spotrun.server.views import AttemptView, JobRow, job_row

if TYPE_CHECKING:
    from spotrun.cli.backend import Backend

__all__ = ["JobRow", "RefusedTries", "attempts_table", "fold_refused_tries", "follow_events", "job_row", "print_whole", "progress_line", "status_table"]


_STATE_STYLE = {
    "SUCCEEDED": "green", "FAILED": "red", "CANCELLED": "yellow", "PREEMPTED": "magenta",
    "WAITING": "yellow", "RUNNING": "cyan", "PROVISIONING": "blue", "PENDING": "white",
}


def print_whole(console: Console, table: Table) -> None:
    """Print a table on a terminal as wide as the terminal, and elsewhere (a pipe, a file) as wide as the table needs:
    rich would otherwise cut its cells to 80 columns, and a script reading the output would get "0.7…" for 0.762."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    Console(file=console.file, width=max(natural, console.width), no_color=console.no_color).print(table)


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


@dataclass(frozen=True)
class RefusedTries:
    """Launch tries in a row, in the same market, that got no instance and cost nothing (refused, or a gang's node
    given back when another was refused): a job that waits for spot through a long gap is refused hundreds of times,
    and each try is an attempt."""

    tries: tuple[AttemptView, ...]

    @property
    def numbers(self) -> str:
        return f"{self.tries[0].number}–{self.tries[-1].number}"

    @property
    def zones(self) -> str:
        return ", ".join(dict.fromkeys(a.zone for a in self.tries))

    @property
    def nodes(self) -> str:
        return ", ".join(str(rank) for rank in dict.fromkeys(a.node_rank for a in self.tries))

    @property
    def ended(self) -> str:
        return f"{clock_time(self.tries[0].ended_at)}–{clock_time(self.tries[-1].ended_at)}"

    @property
    def end(self) -> str:
        reasons = Counter(a.end_reason for a in self.tries)
        return ", ".join(f"{reason} ×{count}" for reason, count in reasons.items())


def fold_refused_tries(attempts: list[AttemptView]) -> list[AttemptView | RefusedTries]:
    """The attempts, with each run of two or more consecutive refused tries in one market (`RefusedTries`) as one
    item."""
    items: list[AttemptView | RefusedTries] = []
    run: list[AttemptView] = []

    def close_run() -> None:
        items.extend(run if len(run) < 2 else [RefusedTries(tuple(run))])
        run.clear()

    for attempt in attempts:
        if not _refused(attempt):
            close_run()
            items.append(attempt)
            continue
        if run and run[-1].market != attempt.market:
            close_run()
        run.append(attempt)
    close_run()
    return items


def _refused(attempt: AttemptView) -> bool:
    """A try that ended without an instance and cost nothing."""
    return (attempt.started_at is None and attempt.ended_at is not None and attempt.end_reason is not None
            and attempt.billed_seconds == 0)


def attempts_table(attempts: list[AttemptView], job_id: int, now: float) -> Table:
    """One row per attempt, but one for each run of refused tries alike; a multi-node job's rows also name their
    node, its address, and the node's cost."""
    multi_node = any(a.node_rank for a in attempts)
    table = Table(title=f"attempts of job {job_id}" + (" (one per node and instance)" if multi_node else ""))
    columns = ["#"] + (["node", "address"] if multi_node else []) + ["market", "zone", "instance", "started", "ended", "end", "billed s", "$/h", "cost"]
    for column in columns:
        table.add_column(column)
    for a in fold_refused_tries(attempts):
        if isinstance(a, RefusedTries):
            last = a.tries[-1]
            node = [a.nodes, "—"] if multi_node else []
            table.add_row(a.numbers, *node, last.market, a.zones, "—", "—", a.ended, a.end, "0",
                          f"{last.price_per_hour:.4f}", "$0.0000")
            continue
        billed = a.billed_seconds if a.ended_at else max(now - (a.started_at or now), 0)
        node = [str(a.node_rank), a.address or "—"] if multi_node else []
        table.add_row(
            str(a.number), *node, a.market, a.zone, a.instance_id or "—", clock_time(a.started_at),
            clock_time(a.ended_at), a.end_reason or a.state, f"{billed:.0f}", f"{a.price_per_hour:.4f}",
            f"${billed / 3600 * a.price_per_hour:.4f}",
        )
    return table


def follow_events(backend: Backend, job_id: int, console: Console, poll: float = 0.3) -> str:
    """Print the job's events as they happen, under a live status line, until it ends; returns its final state."""
    last_event = 0
    with Live(console=console, auto_refresh=False, transient=True) as live:
        while True:
            row = backend.rows(job_id)[0]  # read before the events: every event of a job that has ended is stored
            events = backend.events(job_id, after=last_event)
            for event in events:
                live.console.print(f"[dim]{clock_time(event.at)}[/] {_event_text(event.kind, event.message)}")
                last_event = event.id
            if is_terminal(row.state):
                return row.state
            live.update(progress_line(row), refresh=True)
            time.sleep(poll)


def attempts_summary(row: JobRow, tries: int) -> str:
    """The attempts that got an instance and the preemptions; the `tries` beyond them got no instance (no capacity,
    or a standby refused), which the attempts' numbers count too."""
    unplaced = tries - row.attempts
    return (f"{_count(row.attempts, 'attempt')}, {_count(row.preemptions, 'preemption')}"
            + (f" ({unplaced} more launch {'try' if unplaced == 1 else 'tries'} got no instance)" if unplaced else ""))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def progress_line(row: JobRow) -> Text:
    where = f"{row.market} in {row.zone}" if row.market else "no instance"
    step = f"checkpoint step {row.checkpoint_step}" if row.checkpoint_step is not None else "no checkpoint yet"
    if row.checkpoint_step is not None and row.total_steps:
        step += f" of {row.total_steps} ({row.checkpoint_step / row.total_steps:.0%})"
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
