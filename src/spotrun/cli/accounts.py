"""Where `spotrun user` and `spotrun token` act, and which store or server that is.

With SPOTRUN_SERVER set, on that server: through its API with SPOTRUN_TOKEN, as every remote command
(`remote_accounts`). Without it, on the store this machine reaches ($SPOTRUN_DATABASE_URL, else SQLite under
$SPOTRUN_HOME), as the server's administrator: how the first admin is made on the server's machine. A token made on
the one is refused by the other, so each says where it acted (`where`). `spotrun audit` reads the changes back from
the same place.

Every change is recorded in the audit log with its actor: over a server, the user SPOTRUN_TOKEN names (the server
records it); on the store, `cli:<OS user>@<host>` (`store_actor`), so that a change made with the database's
credentials, the most powerful way, leaves a trace too."""

from __future__ import annotations

import getpass
import os
import socket
import time
from typing import TYPE_CHECKING, Protocol

from spotrun.audit_kinds import CLI_ACTOR_MARK
from spotrun.cli.backend import SERVER_ENV, server_and_token
from spotrun.server import users as users_api
from spotrun.server.audit import audit_page
from spotrun.server.users import IssuedToken, Offboarded, TokenRecord, UserError, UserRecord
from spotrun.state import Store
from spotrun.state.store import shown_url

if TYPE_CHECKING:
    from spotrun.api_models import AuditFilter, AuditPage


class WhoseTokens(UserError):
    """`spotrun token list` cannot tell whose tokens to list (a bad argument)."""


class Accounts(Protocol):
    where: str  # "in the store URL", "on the server at URL": said with what a command did

    def add_user(self, name: str, *, admin: bool) -> IssuedToken: ...

    def create_token(self, user: str) -> IssuedToken: ...

    def revoke_token(self, token_or_prefix: str) -> bool:
        """Revoke the token with this prefix, or this whole token (NotThatToken when its secret is not that
        token's, and nothing is revoked); False when there is no live token of that prefix the caller may revoke."""
        ...

    def users(self) -> list[UserRecord]: ...

    def disable_user(self, name: str) -> Offboarded: ...

    def enable_user(self, name: str) -> UserRecord: ...

    def set_admin(self, name: str, is_admin: bool) -> UserRecord: ...

    def tokens(self, user: str | None) -> tuple[str, tuple[TokenRecord, ...]]:
        """Whose tokens they are, and those tokens: `user`'s, or (None) the caller's."""
        ...

    def audit(self, chosen: AuditFilter) -> AuditPage:
        """The audit log's events `chosen` selects, newest first (over a server: an admin's only)."""
        ...

    def close(self) -> None: ...


def store_actor() -> str:
    """Who the audit log says made a change on the store directly: `cli:<OS user>@<host>`, the account the command
    runs as (its effective uid's name, else what getpass finds) on this machine. A record, not a proof: whoever
    reaches the database may write anything there."""
    try:
        import pwd

        account = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):  # not POSIX, or a uid without a passwd entry (a container's)
        try:
            account = getpass.getuser()
        except (OSError, KeyError):
            account = f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "unknown"
    return f"{CLI_ACTOR_MARK}{account}@{socket.gethostname() or 'unknown host'}"


class StoreAccounts:
    def __init__(self, store: Store | None = None) -> None:
        self.store = store if store is not None else Store()
        self.shown_url = shown_url(self.store.url)  # without its password
        self.where = f"in the store {self.shown_url}"
        self.actor = store_actor()

    def add_user(self, name: str, *, admin: bool) -> IssuedToken:
        return users_api.add_user(self.store, name, time.time(), admin=admin, actor=self.actor)

    def create_token(self, user: str) -> IssuedToken:
        return users_api.create_token(self.store, user, time.time(), actor=self.actor)

    def revoke_token(self, token_or_prefix: str) -> bool:
        return users_api.revoke_token(self.store, token_or_prefix, time.time(), actor=self.actor)

    def users(self) -> list[UserRecord]:
        return users_api.list_users(self.store)

    def disable_user(self, name: str) -> Offboarded:
        return users_api.disable_user(self.store, name, time.time(), actor=self.actor)

    def enable_user(self, name: str) -> UserRecord:
        return users_api.enable_user(self.store, name, time.time(), actor=self.actor)

    def set_admin(self, name: str, is_admin: bool) -> UserRecord:
        return users_api.set_admin(self.store, name, is_admin, time.time(), actor=self.actor)

    def tokens(self, user: str | None) -> tuple[str, tuple[TokenRecord, ...]]:
        if user is None:
            raise WhoseTokens(f"name the user whose tokens to list (`spotrun token list NAME`): without {SERVER_ENV} "
                              f"it reads the store {self.shown_url}, where there is no caller to default to")
        found = users_api.find_user(self.store, user)
        return found.name, found.tokens

    def audit(self, chosen: AuditFilter) -> AuditPage:
        return audit_page(self.store, chosen)

    def close(self) -> None:
        self.store.dispose()


def current_accounts() -> Accounts:
    """The server $SPOTRUN_SERVER names (with $SPOTRUN_TOKEN), else this machine's store."""
    named = server_and_token(
        f"`spotrun user` and `spotrun token` act on that server with a token of yours (an admin's for other users); to "
        f"act on this machine's store instead (how the first admin is made), unset {SERVER_ENV}")
    if named is None:
        return StoreAccounts()
    from spotrun.cli.remote_accounts import RemoteAccounts  # httpx, only when a server is named

    return RemoteAccounts(*named)
