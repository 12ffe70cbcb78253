"""`spotrun audit`: who changed which user or token of the team server, and when (the audit log, newest first).

Like `spotrun user` and `spotrun token`, it reads where they act (`accounts`): the server SPOTRUN_SERVER names, as
SPOTRUN_TOKEN's user (an admin's only), else this machine's store. The command imports the store, the server's models
and the HTTP client itself: this module is loaded at every start of `spotrun`.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from spotrun.audit_kinds import AUDIT_KINDS
from spotrun.cli.admin import acting
from spotrun.cli.consoles import CliConsole, print_whole
from spotrun.cli.failing import bad_argument, errors
from spotrun.cli.formats import utc_time
from spotrun.cli.moments import FORMS, NotAMoment, moment
from spotrun.limits import DEFAULT_AUDIT_EVENTS, MAX_AUDIT_EVENTS, MAX_ID

if TYPE_CHECKING:
    from spotrun.api_models import AuditEvent, AuditFilter

console = CliConsole()


def audit_command(
    user: Annotated[Optional[str], typer.Option(
        "--user", help="only the changes to this user or made by them (or by an actor as listed: cli:OSUSER@HOST); "
        "in any case")] = None,
    kind: Annotated[Optional[list[str]], typer.Option(
        "--kind", help=f"only this kind of change (repeat it for several): {', '.join(AUDIT_KINDS)}")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help=f"only the changes since then: {FORMS}")] = None,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=MAX_AUDIT_EVENTS, help="at most this many, the newest")] = DEFAULT_AUDIT_EVENTS,
    before_id: Annotated[Optional[int], typer.Option(
        "--before-id", min=1, max=MAX_ID, help="only the changes older than this id: the next page, as a listing "
        "cut short names it")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output (times in unix seconds)")] = False,
) -> None:
    """Who changed which user or token, and when, newest first: users added, disabled and enabled, admins made and
    unmade, tokens made and revoked (by their ids only), whether over a server (by its signed-in user) or on the
    store (by `cli:<OS user>@<host>`). Over a server: admins only."""
    chosen = _filter(user, kind, since, limit, before_id)
    with acting() as accounts:
        page = accounts.audit(chosen)
    more = f"older changes left out: add --before-id {page.next_before_id}" if page.next_before_id else None
    if as_json:
        typer.echo(json.dumps([event.model_dump() for event in page.events], indent=2))
        if more:
            errors.print(more, soft_wrap=True, highlight=False)
        return
    filtered = " that match" if user or kind or since or before_id else ""
    if not page.events:
        console.print(f"no changes to users or tokens{filtered} {escape(accounts.where)}", soft_wrap=True)
        return
    console.print(f"changes to users and tokens{filtered} {escape(accounts.where)}, newest first:", soft_wrap=True)
    print_whole(console, _events_table(page.events))
    if more:
        console.print(f"[dim]{more}[/dim]", soft_wrap=True, highlight=False)


def _filter(
    user: str | None, kinds: list[str] | None, since: str | None, limit: int, before_id: int | None,
) -> AuditFilter:
    """The options as the filter the store or the server reads; a bad one is a bad argument naming it, refused before
    anything is read."""
    from pydantic import ValidationError

    from spotrun.api_models import AuditFilter

    unknown = [kind for kind in kinds or () if kind not in AUDIT_KINDS]
    if unknown:
        raise bad_argument(f"--kind {unknown[0]!r} is no kind of change; the kinds: {', '.join(AUDIT_KINDS)}")
    try:
        since_seconds = None if since is None else moment(since, time.time())
    except NotAMoment as problem:
        raise bad_argument(f"--since {problem}") from None
    try:
        return AuditFilter(user=user, kind=list(dict.fromkeys(kinds or ())), since=since_seconds, limit=limit,
                           before_id=before_id)
    except ValidationError as invalid:
        problem = invalid.errors()[0]
        option = "--" + str(problem["loc"][0]).replace("_", "-")
        raise bad_argument(f"{option}: {problem['msg']}") from None


def _events_table(events: list[AuditEvent]) -> Table:
    table = Table()
    for column in ("id", "when", "change", "by", "user", "tokens"):
        table.add_column(column)
    for event in events:
        tokens = event.token_prefix or ", ".join(event.revoked_tokens) or "—"
        table.add_row(str(event.id), utc_time(event.at), escape(event.kind), escape(event.actor), escape(event.user),
                      escape(tokens))
    return table
