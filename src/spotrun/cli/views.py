"""How the CLI shows jobs: the `status` tables and the follow display (the rows themselves: `spotrun.api_models`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from spotrun.cli.formats import clock_time, format_duration
from spotrun.cli.refusals import RefusalStreak, RefusedTries, fold_refused_tries
from spotrun.costs import ledger
from spotrun.control.states import is_terminal

if TYPE_CHECKING:  # the rows come from the backend: the models are not needed to show them
    from spotrun.api_models import AttemptView, BillView, EventView, JobRow
    from spotrun.cli.backend import Backend

__all__ = ["attempts_table", "follow_events", "progress_line", "status_table"]

_STATE_STYLE = {
    "SUCCEEDED": "green", "FAILED": "red", "CANCELLED": "yellow", "PREEMPTED": "magenta",
    "WAITING": "yellow", "RUNNING": "cyan", "PROVISIONING": "blue", "PENDING": "white",
}


def status_table(rows: list[JobRow], caller: str | None = None) -> Table:
    """The jobs, one a row; with an owner column where some are not the `caller`'s (`Backend.caller`): an admin's
    list on a team server, even of one other user's jobs. The caller's own jobs need none. Not knowing the caller (a
    server older than `api_models.CALLER_HEADER`), where they are more than one user's."""
    owned = _shows_owners(rows, caller)
    table = Table(title="spotrun jobs")
    columns = ["id", "name", *(["owner"] if owned else []), "state", "attempts", "preemptions", "market/zone",
               "elapsed", "cost so far"]
    for column in columns:
        table.add_column(column, justify="right" if column in ("id", "attempts", "preemptions", "elapsed") else "left")
    for row in rows:  # a str cell is markup: what the store holds is escaped
        where = f"{row.market} / {row.zone}" if row.market else "—"
        owner = [escape(row.owner or "—")] if owned else []
        table.add_row(
            str(row.id), escape(row.name), *owner, f"[{_STATE_STYLE.get(row.state, 'white')}]{escape(row.state)}[/]",
            str(row.attempts), str(row.preemptions), escape(where), format_duration(row.elapsed), job_cost_cell(row),
        )
    return table


def _shows_owners(rows: list[JobRow], caller: str | None) -> bool:
    if caller is None:
        return len({row.owner for row in rows}) > 1
    return any(row.owner != caller for row in rows)


def job_cost_cell(row: JobRow) -> str:
    """The job's cost so far, and how many attempts it leaves out (`ledger.priced`)."""
    if not row.unpriced_attempts:
        return f"${row.cost:,.4f}"
    return f"${row.cost:,.4f} + {row.unpriced_attempts:,} unpriced"


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
            cells = [a.numbers, *node, last.market, a.zones, "—", "—", a.ended, a.end, "0",
                     price_cell(last.price_per_hour), "$0.0000"]
        else:
            node = [str(a.node_rank), a.address or "—"] if multi_node else []
            cells = [str(a.number), *node, a.market, a.zone, a.instance_id or "—", clock_time(a.started_at, now),
                     clock_time(a.ended_at, now), end_cell(a), billed_cell(a, now), price_cell(a.price_per_hour),
                     cost_cell(a)]
        table.add_row(*map(escape, cells))  # a str cell is markup; these are the store's (and the cloud's) words
    return table


def end_cell(attempt: AttemptView) -> str:
    """How the attempt ended (or its state), and the early warning it had, if any (e.g. "migrated, warned:
    rebalance")."""
    end = attempt.end_reason or attempt.state
    return f"{end}, warned: {attempt.warning.split('/', 1)[-1]}" if attempt.warning else end


def price_cell(price_per_hour: float) -> str:
    """A price as stored; one over the cap (`ledger.priced`) in few digits: 1e308 printed 309 of them."""
    return f"{price_per_hour:.4f}" if price_per_hour <= ledger.MAX_PRICE_PER_HOUR else f"{price_per_hour:.4g}"


def cost_cell(attempt: AttemptView) -> str:
    """The attempt's cost, and when it is provisional, what settles it (`control.reclaims`)."""
    if attempt.cost is None:
        return f"unpriced: over {ledger.MAX_PRICE_PER_HOUR:,.0f} $/h"
    if attempt.left_to_cloud_until is None:
        return f"${attempt.cost:,.4f}"
    return f"${attempt.cost:,.4f} (free if the cloud takes it back by {clock_time(attempt.left_to_cloud_until)})"


def provisional_note(bill: BillView) -> str | None:
    """What part of a bill the cloud may still waive, or None."""
    if not bill.provisional:
        return None
    by = f" by {clock_time(bill.provisional_until)}" if bill.provisional_until else ""
    return (f"${bill.provisional:,.4f} of it is provisional: instances left for the cloud to take back, free if it "
            f"does{by}, charged to then if not")


def billed_cell(attempt, now: float) -> str:
    """The seconds held, and what the cloud charged for them where its rule made that differ."""
    held, charged = ledger.held_seconds(attempt, now), ledger.charged_seconds(attempt, now)
    return f"{held:,.0f}" if round(held) == round(charged) else f"{held:,.0f} ({charged:,.0f} charged)"


def follow_events(backend: Backend, job_id: int, console: Console, poll: float = 0.3) -> str:
    """Print the job's events as they happen, under a live status line, until it ends; returns its final state."""
    last_event = 0
    refusals = RefusalStreak()
    with Live(console=console, auto_refresh=False, transient=True) as live:
        while True:
            row = backend.rows(job_id)[0]  # read before the events: every event of a job that has ended is stored
            for event in backend.events(job_id, after=last_event):
                _print_events(live.console, refusals.take(event))
                last_event = event.id
            if is_terminal(row.state):
                _print_events(live.console, refusals.close())
                return row.state
            line = progress_line(row)
            if (folded := refusals.status()) is not None:
                line.append(f" · {folded}", style="yellow")
            live.update(line, refresh=True)
            time.sleep(poll)


def _print_events(console: Console, items: list[EventView | str]) -> None:
    # An event's words may be a cloud's (a notice's detail from its metadata service): never markup
    for item in items:
        if isinstance(item, str):
            console.print(f"[yellow]{escape(item)}[/]", highlight=False)
        else:
            console.print(f"[dim]{clock_time(item.at)}[/] {_event_text(item.kind, escape(item.message))}")


def attempts_summary(row: JobRow, tries: int) -> str:
    """The attempts that got an instance and the preemptions; the `tries` beyond them got no instance (no capacity,
    or a standby refused), which the attempts' numbers count too."""
    unplaced = tries - row.attempts
    return (f"{_count(row.attempts, 'attempt')}, {_count(row.preemptions, 'preemption')}"
            + (f" ({unplaced} more launch {'try' if unplaced == 1 else 'tries'} got no instance)" if unplaced else ""))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def progress_line(row: JobRow) -> Text:
    where = escape(f"{row.market} in {row.zone}") if row.market else "no instance"
    step = f"checkpoint step {row.checkpoint_step}" if row.checkpoint_step is not None else "no checkpoint yet"
    if row.checkpoint_step is not None and row.total_steps:
        step += f" of {row.total_steps} ({row.checkpoint_step / row.total_steps:.0%})"
    return Text.from_markup(
        f"[bold]job {row.id}[/] [{_STATE_STYLE.get(row.state, 'white')}]{escape(row.state)}[/] · "
        f"attempt {row.attempts} · "
        f"{where} · {row.preemptions} preemptions · {step} · {format_duration(row.elapsed)} · ${row.cost:,.4f} so far"
    )


def _event_text(kind: str, message: str) -> str:
    """`message` (markup: escaped by the caller) in the style of its kind."""
    styles = {
        "preemption_notice": "bold magenta", "state": "bold", "launch_refused": "yellow", "chaos": "magenta",
        "woken": "green", "stuck": "bold red",
    }
    style = styles.get(kind)
    return f"[{style}]{message}[/]" if style else message
