"""`spotrun prune-logs`: remove the logs of jobs that ended long ago (`spotrun.control.log_retention`).

Like `spotrun user` and `spotrun token`, it acts on the store directly ($SPOTRUN_DATABASE_URL), never over HTTP:
whoever can reach the database is the server's administrator. The command imports the store itself: this module is
loaded at every start of `spotrun`.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Annotated

import typer

from spotrun.cli.consoles import CliConsole
from spotrun.cli.failing import bad_argument
from spotrun.cli.formats import byte_size

console = CliConsole()
# The shortest age a job's logs are kept for (`--older-than`, `server --keep-logs`). A bare number is seconds: "30"
# meant as days removed every log half a minute after its job ended.
MIN_LOG_AGE_SECONDS = 3600.0


def log_age(option: str, written: str) -> float:
    """Seconds of the age `written` for `option`, at least an hour; else a bad argument naming the option."""
    from spotrun.spec.durations import parse_duration  # the spec package's models come with it

    try:
        seconds = parse_duration(written)
    except ValueError as problem:
        raise bad_argument(f"{option} {problem}") from None
    if seconds < MIN_LOG_AGE_SECONDS:
        raise bad_argument(f"{option} must be at least 1h; got {written!r} ({seconds:g} s; a bare number is seconds)")
    return seconds


def prune_logs_command(
    older_than: Annotated[str, typer.Option(
        "--older-than", help="remove the logs of jobs that ended longer ago than this: 30d, 12h, 90m")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="say what would be removed; remove nothing")] = False,
) -> None:
    """Remove the logs of jobs that ended long ago; their jobs, attempts, events and bills stay. Acts on the store
    ($SPOTRUN_DATABASE_URL)."""
    from spotrun.control.log_retention import prune_logs, stored_log_bytes
    from spotrun.state import Store

    age = log_age("--older-than", older_than)
    now = time.time()
    store = Store()
    try:
        pruned = prune_logs(store, ended_before=now - age, now=now, dry_run=dry_run)
        with store.session() as session:
            left = stored_log_bytes(session)
        sqlite = store.engine.dialect.name == "sqlite"
    finally:
        store.dispose()
    # in UTC, as the log stream's times: the store (and a server's logs) may be read in another zone
    cutoff = datetime.fromtimestamp(now - age, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    verb = "would remove" if dry_run else "removed"
    console.print(
        f"{verb} the logs of {pruned.attempts} attempt(s) of {pruned.jobs} job(s) that ended before {cutoff} "
        f"({byte_size(pruned.bytes)}); the store holds {byte_size(left)} of logs"
    )
    if sqlite and pruned.bytes and not dry_run:
        console.print("SQLite reuses the freed pages; `VACUUM` on the database gives them back to the disk")
