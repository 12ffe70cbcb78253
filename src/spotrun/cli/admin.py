"""`spotrun user` and `spotrun token`: the team server's users and API tokens.

With SPOTRUN_SERVER set they act on that server through its API, with SPOTRUN_TOKEN (an admin's, for other users);
without it, on the store this machine reaches, as the server's administrator: how the first admin is made on the
server's machine. Each says which store or server it acted on (`accounts`). The commands import the store, the
server's users and the HTTP client themselves: this module is loaded at every start of `spotrun`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from spotrun.cli.command_groups import CommandGroup
from spotrun.cli.consoles import CliConsole, print_whole
from spotrun.cli.failing import BAD_ARGUMENT, FAILED, fail
from spotrun.cli.formats import utc_time

if TYPE_CHECKING:
    from spotrun.cli.accounts import Accounts
    from spotrun.server.users import IssuedToken, Offboarded, TokenRecord, UserRecord

users_app = typer.Typer(help="Users of the team server ($SPOTRUN_SERVER's, else those of this machine's store).",
                        no_args_is_help=True, cls=CommandGroup)
tokens_app = typer.Typer(help="API tokens of the team server's users ($SPOTRUN_SERVER's, else this machine's store).",
                         no_args_is_help=True, cls=CommandGroup)
AsJson = Annotated[bool, typer.Option("--json", help="machine-readable output (times in unix seconds)")]
console = CliConsole()
errors = CliConsole(stderr=True)


@users_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="the user's name; their jobs are owned by it")],
    admin: Annotated[bool, typer.Option("--admin", help="may see and act on every user's jobs")] = False,
) -> None:
    """Create a user and print their first API token (shown once)."""
    with acting() as accounts:
        _print_token(accounts.add_user(name, admin=admin), accounts.where)


@users_app.command("list")
def user_list(as_json: AsJson = False) -> None:
    """Every user, whether an admin, their tokens' ids (revoked ones marked), and whether disabled. Over a server:
    admins only."""
    with acting() as accounts:
        users = accounts.users()
        if as_json:
            typer.echo(json.dumps([asdict(user) for user in users], indent=2))
            return
        if not users:
            console.print(f"no users {escape(accounts.where)}: `spotrun user add NAME --admin` makes the first",
                          soft_wrap=True)
            return
        _print_table(f"users {accounts.where}", _users_table(users))


@users_app.command("disable")
def user_disable(name: Annotated[str, typer.Argument(help="the user leaving the team")]) -> None:
    """Offboard a user: revoke all their tokens at once and make no new one. Their jobs stay (history, bills), and
    those not ended keep running unless an admin cancels them. Over a server: admins only, not on themselves."""
    with acting() as accounts:
        _print_offboarded(accounts.disable_user(name), accounts.where)


@users_app.command("enable")
def user_enable(name: Annotated[str, typer.Argument(help="a disabled user")]) -> None:
    """Undo `user disable`: no token comes back; `spotrun token create NAME` makes a new one."""
    with acting() as accounts:
        user = accounts.enable_user(name)
        console.print(f"enabled {escape(user.name)} {escape(accounts.where)}; they have no live token until "
                      f"`spotrun token create {escape(user.name)}` makes one", soft_wrap=True)


@users_app.command("set-admin")
def user_set_admin(
    name: Annotated[str, typer.Argument(help="whose admin flag to set")],
    admin: Annotated[bool, typer.Option(
        "--admin/--no-admin", help="make them an admin, or no longer one (the last enabled admin stays)",
        show_default=False,
    )],
) -> None:
    """Make a user an admin (`--admin`), or no longer one (`--no-admin`). Over a server: admins only."""
    with acting() as accounts:
        user = accounts.set_admin(name, admin)
        role = "an admin" if user.is_admin else "not an admin"
        console.print(f"{escape(user.name)} is {role} {escape(accounts.where)}", soft_wrap=True)


@tokens_app.command("create")
def token_create(user: Annotated[str, typer.Argument(help="whose token")]) -> None:
    """Print a new API token for a user (shown once)."""
    with acting() as accounts:
        _print_token(accounts.create_token(user), accounts.where)


@tokens_app.command("list")
def token_list(
    user: Annotated[Optional[str], typer.Argument(help="whose tokens; over a server, yours (the default)")] = None,
    as_json: AsJson = False,
) -> None:
    """A user's tokens: their ids (to revoke one), when each was made, and whether it is revoked."""
    with acting() as accounts:
        owner, tokens = accounts.tokens(user)
        if as_json:
            typer.echo(json.dumps({"user": owner, "tokens": [asdict(token) for token in tokens]}, indent=2))
            return
        _print_table(f"tokens of {owner} {accounts.where}", _tokens_table(tokens))


@tokens_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(help="the token's id (as printed at creation), or the token")]) -> None:
    """Revoke a token: requests carrying it are refused from now on. A whole token given must be that token."""
    from spotrun.server.users import token_prefix

    shown = token_prefix(token_id)  # a whole token's secret is never echoed back
    with acting() as accounts:
        if not accounts.revoke_token(token_id):
            raise fail(f"no live token with id {shown} {accounts.where}")
        console.print(f"revoked token {escape(shown)} {escape(accounts.where)}", soft_wrap=True)


@contextmanager
def acting() -> Iterator[Accounts]:
    """Where the command acts (`spotrun audit` reads there too); a UserError raised there is its error line (it names
    a token by its id only): a bad name, a token that is not the one named, or no user given where one is needed is a
    bad argument; the others (a name taken, no such user) a failure."""
    from spotrun.cli.accounts import WhoseTokens, current_accounts
    from spotrun.server.users import InvalidUserName, NotThatToken, UserError

    accounts = current_accounts()
    try:
        yield accounts
    except UserError as problem:
        bad_argument = isinstance(problem, (InvalidUserName, NotThatToken, WhoseTokens))
        raise fail(str(problem), BAD_ARGUMENT if bad_argument else FAILED) from None
    finally:
        accounts.close()


def _print_token(issued: IssuedToken, where: str) -> None:
    errors.print(f"token {issued.prefix} for {escape(issued.user)}, made {escape(where)}; it is shown only this once:",
                 soft_wrap=True)
    typer.echo(issued.token)  # alone on stdout, for `export SPOTRUN_TOKEN=$(spotrun user add ...)`


def _print_offboarded(done: Offboarded, where: str) -> None:
    state = "was already disabled" if done.already_disabled else "disabled"
    revoked = f"revoked {len(done.revoked)} live token(s) ({', '.join(done.revoked)})" if done.revoked else \
        "no live token to revoke"
    console.print(f"{escape(done.user)} {state} {escape(where)}: {escape(revoked)}; no new token is made for them",
                  soft_wrap=True)
    if done.live_jobs:
        console.print(f"their {done.live_jobs} live job(s) keep running: an admin cancels them (`spotrun status`, "
                      "`spotrun cancel ID`)", soft_wrap=True)
    else:
        console.print("they have no live jobs; their ended jobs are kept", soft_wrap=True)


def _print_table(heading: str, table: Table) -> None:
    """The heading on a line of its own (a table's title is wrapped to the table's width, a long URL with it)."""
    console.print(escape(heading) + ":", soft_wrap=True)
    print_whole(console, table)


def _users_table(users: list[UserRecord]) -> Table:
    table = Table()
    for column in ("user", "admin", "created", "tokens", "disabled"):
        table.add_column(column)
    for user in users:
        tokens = ", ".join(f"{t.prefix} (revoked)" if t.revoked_at is not None else t.prefix for t in user.tokens)
        disabled = utc_time(user.disabled_at) if user.disabled_at is not None else "no"
        table.add_row(escape(user.name), "yes" if user.is_admin else "no", utc_time(user.created_at),
                      escape(tokens) or "—", disabled)
    return table


def _tokens_table(tokens: tuple[TokenRecord, ...]) -> Table:
    table = Table()
    for column in ("id", "created", "revoked"):
        table.add_column(column)
    for token in tokens:
        revoked = utc_time(token.revoked_at) if token.revoked_at is not None else "no"
        table.add_row(escape(token.prefix), utc_time(token.created_at), revoked)
    return table
