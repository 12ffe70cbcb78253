"""The `spotrun` command."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from spotrun.cli import logs as logs_view
from spotrun.cli import market as market_cli
from spotrun.cli.views import attempts_table, follow_events, job_bill, job_rows, status_table
from spotrun.control import jobs as jobs_api
from spotrun.costs.ledger import format_bill
from spotrun.spec import SpecError, load_spec
from spotrun.state import Store

app = typer.Typer(help="Train on spot instances: preemptions handled, checkpoints kept, costs told.", no_args_is_help=True)
app.add_typer(market_cli.app, name="market")
console = Console()
errors = Console(stderr=True)

JobId = Annotated[int, typer.Argument(help="job id, as `spotrun status` shows it")]
AsJson = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _store() -> Store:
    return Store()


def _fail(message: str, code: int = 1) -> typer.Exit:
    errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


@app.command()
def launch(
    job_file: Annotated[Path, typer.Argument(help="the job's YAML file")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="show the job's life until it ends")] = False,
) -> None:
    """Submit a job; starts the controller when none is running."""
    from spotrun.server.daemon import ensure_running

    try:
        spec = load_spec(job_file)
        store = _store()
        job_id = jobs_api.submit(store, spec, time.time(), spec_dir=job_file.resolve().parent)
    except SpecError as problem:
        errors.print("[red]invalid job file[/]")
        typer.echo(str(problem), err=True)  # one unwrapped line per problem, for people and for grep
        raise typer.Exit(2) from None
    ensure_running(store)
    console.print(f"launched job [bold]{job_id}[/] ({spec.name})")
    if follow:
        _follow(store, job_id)


def _follow(store: Store, job_id: int) -> None:
    state = follow_events(store, job_id, console)
    job, job_bill_ = job_bill(store, job_id, time.time())
    console.print(f"job {job_id} [bold]{state}[/] after {len([a for a in job.attempts if a.started_at])} attempts, "
                  f"{job.preemptions} preemptions")
    if job.failure_reason:
        console.print(f"reason: {job.failure_reason}")
    console.print(format_bill(job_bill_))
    if state != "SUCCEEDED":
        raise typer.Exit(1)


@app.command()
def status(job_id: Annotated[Optional[int], typer.Argument()] = None, as_json: AsJson = False) -> None:
    """The jobs (or one job and its attempts)."""
    store = _store()
    try:
        rows = job_rows(store, time.time(), job_id)
    except jobs_api.JobNotFound as missing:
        raise _fail(str(missing)) from None
    if as_json:
        typer.echo(json.dumps([row.to_json() for row in rows], indent=2))
        return
    console.print(status_table(rows))
    if job_id is not None:
        console.print(attempts_table(store, job_id, time.time()))


@app.command()
def logs(job_id: JobId, follow: Annotated[bool, typer.Option("--follow", "-f")] = False) -> None:
    """One stream across all the job's attempts, each attempt's start marked."""
    try:
        logs_view.print_logs(_store(), job_id, sys.stdout, follow=follow)
    except jobs_api.JobNotFound as missing:
        raise _fail(str(missing)) from None


@app.command()
def preempt(
    job_id: JobId,
    notice: Annotated[Optional[float], typer.Option(help="seconds of notice (default: the market's)")] = None,
) -> None:
    """Chaos: have the cloud reclaim the instance the job runs on, with the notice window."""
    try:
        target = jobs_api.preempt(_store(), job_id, time.time(), notice)
    except (jobs_api.JobNotFound, LookupError) as problem:
        raise _fail(str(problem)) from None
    console.print(f"preempting {target.instance_id} (attempt {target.attempt_number} of job {job_id})")


@app.command()
def cancel(job_id: JobId) -> None:
    """Stop a job and give back its instance."""
    store = _store()
    try:
        requested = jobs_api.request_cancel(store, job_id, time.time())
    except jobs_api.JobNotFound as missing:
        raise _fail(str(missing)) from None
    if not requested:
        raise _fail(f"job {job_id} has already ended")
    from spotrun.server.daemon import ensure_running

    ensure_running(store)
    console.print(f"cancelling job {job_id}")


@app.command()
def cost(job_id: JobId, as_json: AsJson = False) -> None:
    """What the job cost, what it would have cost on-demand, and the saving."""
    try:
        job, the_bill = job_bill(_store(), job_id, time.time())
    except jobs_api.JobNotFound as missing:
        raise _fail(str(missing)) from None
    if as_json:
        typer.echo(json.dumps({"job_id": job_id, "state": job.state, **the_bill.to_json()}, indent=2))
    else:
        console.print(f"job {job_id} ({job.name}, {job.state}): {format_bill(the_bill)}")


@app.command()
def controller(
    tick_interval: Annotated[float, typer.Option(help="seconds between reconcile ticks")] = 0.5,
    idle_exit: Annotated[float, typer.Option(help="exit after this long without live jobs (0: never)")] = 0,
) -> None:
    """Run the controller in the foreground."""
    from spotrun.server import daemon

    raise typer.Exit(daemon.main(["--tick-interval", str(tick_interval), "--idle-exit", str(idle_exit)]))


if __name__ == "__main__":
    app()
