"""Where `spotrun user` and `spotrun token` act, and which store or server that is.

With SPOTRUN_SERVER set, on that server: through its API with SPOTRUN_TOKEN, as every remote command
(`remote_accounts`). Without it, on the store this machine reaches ($SPOTRUN_DATABASE_URL, else SQLite under
$SPOTRUN_HOME), as the server's administrator: how the first admin is made on the server's machine. A token made on
the one is refused by the other, so each says where it acted (`where`)."""

from __future__ import annotations

import time
from typing import Protocol

from spotrun.cli.backend import SERVER_ENV, server_and_token
from spotrun.server import users as users_api
from spotrun.server.users import IssuedToken, Offboarded, TokenRecord, UserError, UserRecord
from spotrun.state import Store
from spotrun.state.store import shown_url


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

    def close(self) -> None: ...


class StoreAccounts:
    def __init__(self, store: Store | None = None) -> None:
        self.store = store if store is not None else Store()
        self.shown_url = shown_url(self.store.url)  # without its password
        self.where = f"in the store {self.shown_url}"

    def add_user(self, name: str, *, admin: bool) -> IssuedToken:
        return users_api.add_user(self.store, name, time.time(), admin=admin)

    def create_token(self, user: str) -> IssuedToken:
        return users_api.create_token(self.store, user, time.time())

    def revoke_token(self, token_or_prefix: str) -> bool:
        return users_api.revoke_token(self.store, token_or_prefix, time.time())

    def users(self) -> list[UserRecord]:
        return users_api.list_users(self.store)

    def disable_user(self, name: str) -> Offboarded:
        return users_api.disable_user(self.store, name, time.time())

    def enable_user(self, name: str) -> UserRecord:
        return users_api.enable_user(self.store, name, time.time())

    def set_admin(self, name: str, is_admin: bool) -> UserRecord:
        return users_api.set_admin(self.store, name, is_admin, time.time())

    def tokens(self, user: str | None) -> tuple[str, tuple[TokenRecord, ...]]:
        if user is None:
            raise WhoseTokens(f"name the user whose tokens to list (`spotrun token list NAME`): without {SERVER_ENV} "
                              f"it reads the store {self.shown_url}, where there is no caller to default to")
        found = users_api.find_user(self.store, user)
        return found.name, found.tokens

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
