"""The `spotrun` command.

Every command imports this module and the modules of every command's options: those stay light (no SQLAlchemy, no
server, no simulator, no fsspec), and each command imports what it works with, so that `spotrun --help`, shell
completion, `simulate` and the commands sent to a team server start without loading the store.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from spotrun.cli import checkpoints as checkpoints_cli
from spotrun.config import MAX_TICK_SECONDS, MIN_TICK_SECONDS, InvalidSetting
from spotrun.cli import logs as logs_view
from spotrun.cli import market as market_cli
from spotrun.cli.admin import tokens_app, users_app
from spotrun.cli.audit import audit_command
from spotrun.cli.backend import Backend, BackendError, Interrupted, current_backend
from spotrun.cli.command_groups import CommandGroup
from spotrun.cli.consoles import CliConsole, print_whole
from spotrun.cli.failing import bad_argument, errors
from spotrun.cli.failing import fail as _fail
from spotrun.cli.job_files import job_file_path
from spotrun.cli.job_ids import JobId, JobIdCommand, OptionalJobId
from spotrun.cli.job_list import RECENT_ENDED, JobList, listed_jobs
from spotrun.cli.retention import log_age, prune_logs_command
from spotrun.cli.simulate_command import simulate
from spotrun.cli.views import (
    attempts_summary, attempts_table, follow_events, provisional_note, status_table,
)
from spotrun.control import job_errors
from spotrun.control.states import ended_without_result
from spotrun.costs.ledger import format_bill
from spotrun.limits import MAX_NODES

console = CliConsole()


# How a command ends itself, or Typer ends it (a usage error): passed on as they are, without a look at the store.
_ENDINGS = (typer.Exit, typer.Abort, typer.TyperException)


class _Commands(CommandGroup):
    """Reports a BackendError (e.g. an unreachable server) or a store that cannot be opened or did not answer as one
    error line, whichever command raised it."""

    def invoke(self, ctx: typer.Context) -> object:
        try:
            return super().invoke(ctx)
        except InvalidSetting as problem:  # a SPOTRUN_* variable: the environment's argument, as `controller` says
            raise bad_argument(str(problem)) from None
        except Interrupted as stopped:
            errors.print(escape(str(stopped)), soft_wrap=True, highlight=False)
            raise typer.Exit(130) from None
        except BackendError as problem:
            raise _fail(str(problem)) from None
        except _ENDINGS:
            raise
        except Exception as problem:
            if (failure := _store_failure(problem)) is None:
                raise
            raise failure from None


def _store_failure(problem: Exception) -> typer.Exit | None:
    """The error line for a store that cannot be opened or did not answer; None for a problem that is not the store's.
    Its errors are imported here, not with the CLI: only a command that has loaded the store can raise them."""
    from sqlalchemy.exc import OperationalError

    from spotrun.state import StoreUnavailable

    if isinstance(problem, StoreUnavailable):
        return _fail(str(problem))
    if isinstance(problem, OperationalError):  # e.g. SQLite's "database is locked" past its busy timeout
        return _fail(f"the store did not answer: {str(problem.orig).strip() or type(problem.orig).__name__}")
    return None


app = typer.Typer(
    help="Train on spot instances: preemptions handled, checkpoints kept, costs told.", no_args_is_help=True,
    cls=_Commands,
)
app.add_typer(market_cli.app, name="market")
app.add_typer(checkpoints_cli.app, name="checkpoints")
app.add_typer(users_app, name="user")
app.add_typer(tokens_app, name="token")
app.command(name="audit")(audit_command)
app.command(name="simulate", help="Compare placement policies on spot availability traces.")(simulate)
app.command(name="prune-logs")(prune_logs_command)

AsJson = Annotated[bool, typer.Option("--json", help="machine-readable output")]
KEEP_LOGS_VAR = "SPOTRUN_KEEP_LOGS"


@app.command()
def launch(
    job_file: Annotated[Path, typer.Argument(help="the job's YAML file", parser=job_file_path)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="show the job's life until it ends")] = False,
) -> None:
    """Submit a job; starts the controller when none is running."""
    from spotrun.spec import SpecError  # the job file's models: loaded by the backend's launch anyway

    backend = current_backend()
    try:
        launched = backend.launch(job_file)
    except SpecError as problem:
        errors.print(f"[red]{escape(problem.heading)}[/]")
        typer.echo(str(problem), err=True)  # one unwrapped line per problem, for people and for grep
        raise typer.Exit(2) from None
    console.print(f"launched job [bold]{launched.id}[/] ({escape(launched.name)})")
    if follow:
        _follow_until_interrupted(backend, launched.id)


def _follow_until_interrupted(backend: Backend, job_id: int) -> None:
    """`_follow`; Ctrl-C stops the following only, and says so: the job goes on (exit 130, as the shell's)."""
    try:
        _follow(backend, job_id)
    except KeyboardInterrupt:
        errors.print(f"stopped following; job {job_id} keeps running: `spotrun logs -f {job_id}`, "
                     f"`spotrun cancel {job_id}`", soft_wrap=True, highlight=False)
        raise typer.Exit(130) from None


def _follow(backend: Backend, job_id: int) -> None:
    state = follow_events(backend, job_id, console)
    detail = backend.detail(job_id)
    console.print(f"job {job_id} [bold]{escape(state)}[/] after {attempts_summary(detail.job, len(detail.attempts))}")
    if detail.job.failure_reason:
        console.print(f"reason: {escape(detail.job.failure_reason)}", soft_wrap=True)
    console.print(format_bill(detail.bill.to_bill(), ended_without_result=ended_without_result(state)))
    if (note := provisional_note(detail.bill)) is not None:
        console.print(note)
    if state != "SUCCEEDED":
        raise typer.Exit(1)


@app.command(cls=JobIdCommand)
def status(
    job_id: OptionalJobId = None,
    every: Annotated[bool, typer.Option("--all", help=f"every job, not only those not ended and the newest "
                                                      f"{RECENT_ENDED} ended")] = False,
    as_json: AsJson = False,
) -> None:
    """The jobs not ended and the newest ended ones (or one job and its attempts)."""
    backend = current_backend()
    try:
        detail = backend.detail(job_id) if job_id is not None else None
        listed = JobList([detail.job], False) if detail is not None else listed_jobs(backend, every)
    except job_errors.JobNotFound as missing:
        raise _fail(str(missing)) from None
    if as_json:
        typer.echo(json.dumps([row.to_json() for row in listed.rows], indent=2))
        return
    if not listed.rows:  # every job not ended and the newest ended are listed: none is no job at all (the caller's)
        console.print("no jobs yet: spotrun launch JOB_FILE", highlight=False)
        return
    print_whole(console, status_table(listed.rows, backend.caller()))
    if listed.older_ended_left_out:
        console.print("[dim]older ended jobs left out: spotrun status --all[/dim]")
    if detail is not None:
        print_whole(console, attempts_table(detail.attempts, detail.job.id, time.time()))
        if detail.job.failure_reason:
            console.print(f"reason: {escape(detail.job.failure_reason)}", soft_wrap=True)
        if detail.stuck:
            console.print(f"[bold red]stuck:[/] {escape(detail.stuck)}", soft_wrap=True)
        if detail.notify:
            told = ", ".join(detail.notify.events)
            console.print(f"notifies: {escape(detail.notify.webhook)} of {told}", soft_wrap=True)


@app.command(cls=JobIdCommand)
def logs(job_id: JobId, follow: Annotated[bool, typer.Option("--follow", "-f")] = False) -> None:
    """One stream across all the job's attempts, each attempt's start marked."""
    try:
        logs_view.print_logs(current_backend(), job_id, sys.stdout, follow=follow)
    except job_errors.JobNotFound as missing:
        raise _fail(str(missing)) from None


@app.command(cls=JobIdCommand)
def preempt(
    job_id: JobId,
    notice: Annotated[Optional[float], typer.Option(help="seconds of notice (default: the market's)")] = None,
    node: Annotated[Optional[int], typer.Option(
        min=0, max=MAX_NODES - 1, help="which node of a multi-node job (default 0)")] = None,
) -> None:
    """Chaos: have the cloud reclaim the instance the job runs on, with the notice window."""
    try:
        job_errors.check_notice(notice, "--notice")
    except job_errors.PreemptRefused as problem:
        raise bad_argument(str(problem)) from None
    try:
        target = current_backend().preempt(job_id, notice, node)
    except (job_errors.JobNotFound, LookupError) as problem:
        raise _fail(str(problem)) from None
    console.print(f"preempting {escape(target.instance_id)} (attempt {target.attempt_number} of job {job_id})")


@app.command(cls=JobIdCommand)
def cancel(job_id: JobId) -> None:
    """Stop a job and give back its instance."""
    try:
        requested = current_backend().cancel(job_id)
    except job_errors.JobNotFound as missing:
        raise _fail(str(missing)) from None
    if not requested:
        raise _fail(f"job {job_id} has already ended")
    console.print(f"cancelling job {job_id}")


@app.command(cls=JobIdCommand)
def cost(job_id: JobId, as_json: AsJson = False) -> None:
    """What the job cost, what it would have cost on-demand, and the saving (none for a job that failed or was
    cancelled: its dollars bought no result)."""
    try:
        job_cost = current_backend().cost(job_id)
    except job_errors.JobNotFound as missing:
        raise _fail(str(missing)) from None
    if as_json:
        typer.echo(json.dumps({"job_id": job_id, "state": job_cost.state, **job_cost.bill.model_dump()}, indent=2))
        return
    line = format_bill(job_cost.bill.to_bill(), ended_without_result=ended_without_result(job_cost.state))
    console.print(f"job {job_id} ({escape(job_cost.name)}, {escape(job_cost.state)}): {line}")
    if (note := provisional_note(job_cost.bill)) is not None:
        console.print(note)


@app.command()
def server(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(envvar="SPOTRUN_SERVER_HOST", help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        envvar="SPOTRUN_SERVER_PORT", min=0, max=65535, help="port to listen on (0: any free one)")] = 8080,
    database_url: Annotated[Optional[str], typer.Option(
        envvar="SPOTRUN_DATABASE_URL", help="the store (default: SQLite under $SPOTRUN_HOME)")] = None,
    public_url: Annotated[Optional[str], typer.Option(
        envvar="SPOTRUN_PUBLIC_URL", help="the URL agents and users reach this server at (default: from host/port)")] = None,
    tick_interval: Annotated[float, typer.Option(
        envvar="SPOTRUN_TICK_INTERVAL", min=MIN_TICK_SECONDS, max=MAX_TICK_SECONDS, help="seconds between ticks")] = 0.5,
    no_controller: Annotated[bool, typer.Option("--no-controller", help="serve the API only; never drive jobs")] = False,
    keep_logs: Annotated[Optional[str], typer.Option(
        envvar=KEEP_LOGS_VAR,
        help="remove the logs of jobs that ended longer ago than this (30d, 12h), at start and every hour "
        "(default: keep them; see `spotrun prune-logs`)")] = None,
) -> None:
    """Run the team server: the HTTP API, the agents' API, /metrics, and the controller, in one process."""
    import logging

    from spotrun.server.serve import PUBLIC_URL_VAR, CannotListen, serve
    from spotrun.state import Store

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    keep_logs_given_as = _given_as(ctx, "keep_logs", "--keep-logs", KEEP_LOGS_VAR)
    keep_seconds = None if keep_logs is None else log_age(keep_logs_given_as, keep_logs)
    try:
        serve(Store(database_url), host=host, port=port, url=public_url, tick_interval=tick_interval,
              run_controller=not no_controller, keep_logs=keep_seconds,
              url_given_as=_given_as(ctx, "public_url", "--public-url", PUBLIC_URL_VAR))
    except InvalidSetting as problem:
        raise bad_argument(str(problem)) from None
    except CannotListen as problem:
        raise _fail(str(problem)) from None


def _given_as(ctx: typer.Context, parameter: str, option: str, variable: str) -> str:
    """What the user set `parameter` with, to name in a refusal: its `option` when given on the command line, else
    its environment `variable`."""
    # by name: Typer's own copy of click has a ParameterSource of its own
    on_the_command_line = getattr(ctx.get_parameter_source(parameter), "name", None) == "COMMANDLINE"
    return option if on_the_command_line else variable


@app.command()
def controller(
    tick_interval: Annotated[float | None, typer.Option(
        min=MIN_TICK_SECONDS, max=MAX_TICK_SECONDS,
        help="seconds between reconcile ticks (default: $SPOTRUN_TICK_INTERVAL, else 0.5)")] = None,
    idle_exit: Annotated[float | None, typer.Option(
        min=0, help="exit after this long without live jobs, 0: never (default: $SPOTRUN_IDLE_EXIT, else 0)")] = None,
) -> None:
    """Run the controller in the foreground."""
    from spotrun.server import daemon

    # given, the options; else the daemon reads the environment (they passed their own defaults over it)
    argv = [] if tick_interval is None else ["--tick-interval", str(tick_interval)]
    idle = idle_exit if idle_exit is not None else (None if os.environ.get("SPOTRUN_IDLE_EXIT") else 0.0)
    argv += [] if idle is None else ["--idle-exit", str(idle)]
    raise typer.Exit(daemon.main(argv))


if __name__ == "__main__":
    app()
