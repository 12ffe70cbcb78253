"""Who may scrape /metrics: anyone, unless the server is given a metrics token (SPOTRUN_METRICS_TOKEN), then only a
request carrying it as a bearer token (Prometheus's `authorization: {credentials: ...}`). /metrics names no user or
job, but its counts and dollars describe the team's whole fleet."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import HTTPException, Request, status
from pydantic import StringConstraints

# Visible ASCII (a header value as it is sent, without spaces), and long enough not to be guessed.
MetricsToken = Annotated[str, StringConstraints(min_length=16, max_length=4096, pattern=r"^[!-~]+$")]
METRICS_REFUSAL = "this server's metrics token is required (Authorization: Bearer <SPOTRUN_METRICS_TOKEN>)"


def metrics_guard(expected: str | None) -> Callable[[Request], None]:
    """A FastAPI dependency answering 401 unless the request carries `expected` as its bearer token (None: anyone)."""

    def check(request: Request) -> None:
        if expected is not None and not _carries(request.headers.get("authorization", ""), expected):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, METRICS_REFUSAL, headers={"WWW-Authenticate": "Bearer"})

    return check


def _carries(authorization: str, expected: str) -> bool:
    scheme, _, token = authorization.partition(" ")
    # Compared as bytes: compare_digest refuses a str with a character past ASCII, which a header may hold.
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())
