"""`spotrun user` and `spotrun token` on a team server: its user API over HTTP, as the user SPOTRUN_TOKEN names.

The server refuses here what it refuses everyone: a non-admin adds no user and lists no users (403), and makes and
revokes only their own tokens. A whole token given to revoke never goes into a URL, which a proxy in front of the
server would log: it is checked by signing in with it, and then revoked by its prefix."""

from __future__ import annotations

import re
from typing import Any

import httpx

from spotrun.api_models import AuditFilter, AuditPage
from spotrun.cli.accounts import WhoseTokens
from spotrun.cli.backend import TOKEN_ENV, BackendError
from spotrun.cli.remote import TIMEOUT, api_client
from spotrun.server.schemas import IssuedTokenView, Me, UserCreated, UserDisabled, UserView
from spotrun.server.users import (
    NAME_PATTERN, PREFIX_PATTERN, TOKEN_MARK, IssuedToken, NotThatToken, Offboarded, TokenRecord, UnknownUser,
    UserConflict, UserExists, UserRecord, check_user_name, token_prefix,
)

# what a token made by spotrun can be (`users._issue`); anything else cannot be one, and is not sent as one
TOKEN_SHAPE = re.compile(rf"{TOKEN_MARK}{PREFIX_PATTERN}_[A-Za-z0-9_-]{{1,256}}")


def new_http_client() -> httpx.Client:
    return httpx.Client(timeout=TIMEOUT)


class RemoteAccounts:
    def __init__(self, server: str, token: str, *, client: httpx.Client | None = None) -> None:
        """`client` sends the requests instead of a client of its own (tests: the app's TestClient)."""
        self.server, self._client = api_client(server, token, client if client is not None else new_http_client())
        self.where = f"on the server at {self.server}"

    def add_user(self, name: str, *, admin: bool) -> IssuedToken:
        check_user_name(name)  # refused with the store's words, before anything is sent
        response = self._send("POST", "/users", json={"name": name, "is_admin": admin})
        if response.status_code == 409:
            raise UserExists(_detail(response))
        created = UserCreated.model_validate(self._ok(response).json())
        return IssuedToken(user=created.user, prefix=created.prefix, token=created.token)

    def create_token(self, user: str) -> IssuedToken:
        issued = IssuedTokenView.model_validate(self._on_user("POST", user, "/tokens").json())
        return IssuedToken(user=issued.user, prefix=issued.prefix, token=issued.token)

    def disable_user(self, name: str) -> Offboarded:
        return UserDisabled.model_validate(self._on_user("POST", name, "/disable").json()).record()

    def enable_user(self, name: str) -> UserRecord:
        return UserView.model_validate(self._on_user("POST", name, "/enable").json()).record()

    def set_admin(self, name: str, is_admin: bool) -> UserRecord:
        return UserView.model_validate(self._on_user("PATCH", name, "", json={"is_admin": is_admin}).json()).record()

    def _on_user(self, method: str, name: str, action: str, **options: Any) -> httpx.Response:
        """A request to a named user's route: no such user is UnknownUser, a change their state forbids
        UserConflict (the server's words)."""
        if not re.fullmatch(NAME_PATTERN, name):  # no user has such a name, and it may not be a URL's path segment
            raise UnknownUser(f"no user named {name!r}")
        response = self._send(method, f"/users/{name}{action}", **options)
        if response.status_code == 404:
            raise UnknownUser(_detail(response))
        if response.status_code == 409:
            raise UserConflict(_detail(response))
        return self._ok(response)

    def revoke_token(self, token_or_prefix: str) -> bool:
        prefix = token_prefix(token_or_prefix)
        if not re.fullmatch(PREFIX_PATTERN, prefix):
            return False  # no token has it
        if token_or_prefix.startswith(TOKEN_MARK) and not self._signs_in(token_or_prefix):
            if prefix in self._live_prefixes():  # a copy of a live token, mangled: revoking by its prefix was wrong
                raise NotThatToken(prefix)
            return False
        response = self._send("POST", f"/tokens/{prefix}/revoke")
        if response.status_code == 404:
            return False
        self._ok(response)
        return True

    def users(self) -> list[UserRecord]:
        return [UserView.model_validate(user).record() for user in self._ok(self._send("GET", "/users")).json()]

    def tokens(self, user: str | None) -> tuple[str, tuple[TokenRecord, ...]]:
        me = self._me()
        if user is not None and user.lower() != me.name.lower():
            raise WhoseTokens(
                f"over a server, `spotrun token list` lists your own tokens ({TOKEN_ENV} is {me.name}'s), not "
                f"{user}'s; an admin sees every user's tokens with `spotrun user list`"
            )
        return me.name, tuple(token.record() for token in me.tokens)

    def audit(self, chosen: AuditFilter) -> AuditPage:
        response = self._send("GET", "/audit", params=chosen.model_dump(exclude_none=True))
        if response.status_code == 404:
            raise BackendError(f"the server at {self.server} keeps no audit log it can show (a spotrun older than this "
                               "one)")
        return AuditPage.model_validate(self._ok(response).json())

    def close(self) -> None:
        self._client.close()

    def _me(self) -> Me:
        body = self._ok(self._send("GET", "/me")).json()
        if "tokens" not in body:
            raise BackendError(f"the server at {self.server} does not list your tokens (a spotrun older than this one)")
        return Me.model_validate(body)

    def _signs_in(self, token: str) -> bool:
        """Whether `token` is a live token of the server's (sent as a credential, in a header, not in a URL)."""
        if not TOKEN_SHAPE.fullmatch(token):
            return False
        response = self._send("GET", "/me", headers={"Authorization": f"Bearer {token}"})
        if response.status_code == 401:
            return False
        self._ok(response)
        return True

    def _live_prefixes(self) -> set[str]:
        """The prefixes of the live tokens the caller sees: their own, or an admin's, everyone's."""
        me = self._me()
        tokens = [token for user in self.users() for token in user.tokens] if me.is_admin else me.tokens
        return {token.prefix for token in tokens if token.revoked_at is None}

    def _send(self, method: str, path: str, **options: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **options)
        except httpx.HTTPError as error:
            raise BackendError(f"cannot reach the spotrun server at {self.server}: {error}") from None

    def _ok(self, response: httpx.Response) -> httpx.Response:
        if response.status_code == 401:
            raise BackendError(f"the server at {self.server} refused the token in {TOKEN_ENV} (unknown or revoked)")
        if response.is_error:
            raise BackendError(f"the server at {self.server} answered {response.status_code}: {_detail(response)}")
        return response


def _detail(response: httpx.Response) -> str:
    """The server's message: a refusal's `detail`, or the messages of a 422's problems."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):  # not JSON, or not an object
        return response.text
    if isinstance(detail, list):
        return "; ".join(str(problem.get("msg", problem)) if isinstance(problem, dict) else str(problem)
                         for problem in detail)
    return str(detail)
