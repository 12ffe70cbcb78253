"""The token of a request that carries a body is checked before the body is read.

FastAPI reads and parses a route's body before the route's dependencies run, the token check among them, so anyone
could make the server read and parse up to `BodyLimit`'s 8 MiB per request without a token. This middleware answers
such a request to the user API (401) or the agent API (403) exactly as the route's own check would, before the
body is read, and leaves what it verified in the request's state for that check (`verified_principal`,
`verified_attempt`), so a request is authenticated once. Both checks are this module's `user_of` and
`attempt_holds`, which the routes' dependencies call for requests without a body.
"""

from __future__ import annotations

import re

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from spotrun.control.tokens import token_matches
from spotrun.server.users import Principal, authenticate
from spotrun.state import Attempt, Store

USER_API = "/api/"
_AGENT_PATH = re.compile(r"/agent/v1/attempts/([^/]*)/")
_MAX_ATTEMPT_ID = 2**31 - 1
USER_REFUSAL = "a valid API token is required"
AGENT_REFUSAL = "this token is not valid for this attempt"


def user_of(store: Store, token: str) -> Principal | None:
    """The user a bearer token (without its scheme) belongs to; None for none, or one unknown or revoked."""
    if not token:
        return None
    with store.session() as session:
        return authenticate(session, token)


def attempt_holds(store: Store, attempt_id: int, authorization: str) -> bool:
    """Whether the Authorization header carries the token of attempt `attempt_id`."""
    token = authorization.removeprefix("Bearer ").strip()
    if not token:
        return False
    with store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        return attempt is not None and token_matches(token, attempt.token_hash)


class AuthBeforeBody:
    """ASGI middleware: 401 / 403 for a request with a body and no valid token, before the body is read."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app, self.store = app, store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        if headers is None or not _has_body(headers):
            await self.app(scope, receive, send)
            return
        path, authorization = scope["path"], headers.get("authorization", "")
        agent = _AGENT_PATH.match(path)
        if path.startswith(USER_API):
            scheme, _, token = authorization.partition(" ")
            principal = await run_in_threadpool(user_of, self.store, token.strip()) if scheme.lower() == "bearer" else None
            if principal is None:
                refusal = JSONResponse({"detail": USER_REFUSAL}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await refusal(scope, receive, send)
                return
            scope.setdefault("state", {})["verified_principal"] = principal
        elif agent is not None:
            attempt_id = _attempt_id(agent.group(1))
            if attempt_id is None or not await run_in_threadpool(attempt_holds, self.store, attempt_id, authorization):
                await JSONResponse({"detail": AGENT_REFUSAL}, status_code=403)(scope, receive, send)
                return
            scope.setdefault("state", {})["verified_attempt"] = attempt_id
        await self.app(scope, receive, send)


def _attempt_id(text: str) -> int | None:
    """The id an attempt may have (the route's path check), else None: no token is valid for it."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) <= _MAX_ATTEMPT_ID else None


def _has_body(headers: Headers) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")
