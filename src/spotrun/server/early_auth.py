"""The token of a request that carries a body is checked before the body is read.

FastAPI reads and parses a route's body before the route's dependencies run, the token check among them, so anyone
could make the server read and parse up to `BodyLimit`'s 8 MiB per request without a token. This middleware answers
such a request to the user API (401) or the agent API (403) exactly as the route's own check would, before the
body is read, and leaves what it verified in the request's state for that check (`verified_principal`,
`verified_attempt`), so a request is authenticated once.
"""

from __future__ import annotations

import json
import re

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from spotrun.control.tokens import token_matches
from spotrun.server.users import Principal, authenticate
from spotrun.state import Attempt, Store

USER_API = "/api/"
_AGENT_PATH = re.compile(r"/agent/v1/attempts/([^/]*)/")
_MAX_ATTEMPT_ID = 2**31 - 1
USER_REFUSAL = "a valid API token is required"
AGENT_REFUSAL = "this token is not valid for this attempt"


class AuthBeforeBody:
    """ASGI middleware: 401 / 403 for a request with a body and no valid token, before the body is read."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app, self.store = app, store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        path, authorization = scope["path"], _header(scope, b"authorization")
        agent = _AGENT_PATH.match(path)
        if path.startswith(USER_API):
            principal = await run_in_threadpool(self._user, authorization)
            if principal is None:
                await _refuse(send, 401, USER_REFUSAL, [(b"www-authenticate", b"Bearer")])
                return
            scope.setdefault("state", {})["verified_principal"] = principal
        elif agent is not None:
            attempt_id = _attempt_id(agent.group(1))
            if attempt_id is None or not await run_in_threadpool(self._attempt_holds, attempt_id, authorization):
                await _refuse(send, 403, AGENT_REFUSAL)
                return
            scope.setdefault("state", {})["verified_attempt"] = attempt_id
        await self.app(scope, receive, send)

    def _user(self, authorization: str) -> Principal | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        with self.store.session() as session:
            return authenticate(session, token.strip())

    def _attempt_holds(self, attempt_id: int, authorization: str) -> bool:
        token = authorization.removeprefix("Bearer ").strip()
        if not token:
            return False
        with self.store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            return attempt is not None and token_matches(token, attempt.token_hash)


def _attempt_id(text: str) -> int | None:
    """The id an attempt may have (the route's path check), else None: no token is valid for it."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) <= _MAX_ATTEMPT_ID else None


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    return bool(_header(scope, b"transfer-encoding")) or (length != "" and length != "0")


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


async def _refuse(send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
