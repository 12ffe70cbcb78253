"""`spotrun user` and `spotrun token`: the team server's users and API tokens, managed on the server's store.

These act on the store directly ($SPOTRUN_DATABASE_URL, as `spotrun server` uses), never over HTTP: whoever can
reach the database is the server's administrator. The commands import the store and `spotrun.server.users`
themselves: this module is loaded at every start of `spotrun`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from spotrun.cli.failing import BAD_ARGUMENT, FAILED

if TYPE_CHECKING:
    from spotrun.server.users import IssuedToken

users_app = typer.Typer(help="Users of the team server (acts on the server's store).", no_args_is_help=True)
tokens_app = typer.Typer(help="API tokens of the team server's users (acts on the server's store).",
                         no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


@users_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="the user's name; their jobs are owned by it")],
    admin: Annotated[bool, typer.Option("--admin", help="may see and act on every user's jobs")] = False,
) -> None:
    """Create a user and print their first API token (shown once)."""
    from spotrun.server.users import add_user

    _print_token(_issue(lambda store: add_user(store, name, time.time(), admin=admin)))


@tokens_app.command("create")
def token_create(user: Annotated[str, typer.Argument(help="whose token")]) -> None:
    """Print a new API token for a user (shown once)."""
    from spotrun.server.users import create_token

    _print_token(_issue(lambda store: create_token(store, user, time.time())))


@tokens_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(help="the token's id (as printed at creation), or the token")]) -> None:
    """Revoke a token: requests carrying it are refused from now on. A whole token given must be that token."""
    from spotrun.server.users import NotThatToken, revoke_token, token_prefix
    from spotrun.state import Store

    store = Store()
    try:
        revoked = revoke_token(store, token_id, time.time())
    except NotThatToken as problem:  # its message names the token by its id only
        errors.print(f"[red]error:[/] {escape(str(problem))}", soft_wrap=True)
        raise typer.Exit(BAD_ARGUMENT) from None
    finally:
        store.dispose()
    shown = token_prefix(token_id)  # a whole token's secret is never echoed back
    if not revoked:
        errors.print(f"[red]error:[/] no live token with id {escape(shown)}", soft_wrap=True)
        raise typer.Exit(FAILED)
    console.print(f"revoked token {escape(shown)}")


def _issue(make) -> IssuedToken:
    from spotrun.server.users import InvalidUserName, UserError
    from spotrun.state import Store

    store = Store()
    try:
        return make(store)
    except UserError as problem:  # a name no user may have is a bad argument; a name taken, or no such user, not
        errors.print(f"[red]error:[/] {escape(str(problem))}", soft_wrap=True)
        raise typer.Exit(BAD_ARGUMENT if isinstance(problem, InvalidUserName) else FAILED) from None
    finally:
        store.dispose()


def _print_token(issued: IssuedToken) -> None:
    errors.print(f"token {issued.prefix} for {escape(issued.user)}; it is shown only this once:")
    typer.echo(issued.token)  # alone on stdout, for `export SPOTRUN_TOKEN=$(spotrun user add ...)`
