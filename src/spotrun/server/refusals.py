"""422 replies that can always be written: FastAPI's own echoes each wrong value back as JSON, and a body holding
NaN, Infinity or 1e400 (which Python's JSON reader accepts) made that reply fail, a 500 instead of the 422. A long
wrong value is echoed in part: a job file of 1.1 MB refused for its length came back whole in the 422. No token's
secret is echoed (a token pasted into a URL came back whole): it is cut to the token's prefix."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from spotrun.server.users import without_secrets

MAX_ECHO_CHARS = 1_000  # of a wrong value, as JSON, echoed back in a 422


def answer_invalid_requests(app: FastAPI) -> None:
    """Reply to a request that fails validation with 422 and its errors, non-finite numbers written as text."""
    app.add_exception_handler(RequestValidationError, _invalid_request)


async def _invalid_request(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    detail = [_echoing_in_part(problem) for problem in _writable(jsonable_encoder(error.errors()))]
    return JSONResponse({"detail": detail}, status_code=422)


def _echoing_in_part(problem: Any) -> Any:
    """The error with its `input` cut to MAX_ECHO_CHARS of its JSON, saying how long it was."""
    if not isinstance(problem, dict) or "input" not in problem:
        return problem
    written = json.dumps(problem["input"], ensure_ascii=False)
    if len(written) <= MAX_ECHO_CHARS:
        return problem
    return {**problem, "input": f"{written[:MAX_ECHO_CHARS]}... ({len(written):,} characters in all, not echoed)"}


def _writable(value: Any) -> Any:
    """The errors as JSON can carry them and a reply may show them: non-finite numbers as text, tokens' secrets cut."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return without_secrets(value)
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_writable(item) for item in value]
    return value
