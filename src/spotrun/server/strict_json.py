"""Request bodies whose JSON holds a lone UTF-16 surrogate ("\\ud800": valid JSON, but no text UTF-8 can carry) are
refused 422 as JSON that cannot be read. They passed validation, then failed where the text was written: a 500 from
the database, from the log's encoding, or from the 422 reply that echoed them back. So are bodies that are not
UTF-8 (nor UTF-16 or -32) at all, which FastAPI answered with a 400 the API's schema does not list.

A route that takes no body refuses one (422, before anything is done): FastAPI ignores a body no parameter reads, so
`POST /jobs/3/cancel` with `{"dry_run": true}` cancelled the job. An empty body (none, or Content-Length 0) is no
body. A request with a body has had its token checked before it is read (`early_auth`).

A route that takes a body refuses one not sent as JSON (no Content-Type, or another than application/json or
*+json), with a 422 naming the Content-Type: FastAPI does not read such a body as JSON, and its 422 said only that the
body is no object, which a valid job sent as text/plain seemed not to be."""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from spotrun.server.refusals import MAX_ECHO_CHARS
from spotrun.server.schemas import InvalidRequest

# Documented on each route that takes no body (a route with parameters also lists FastAPI's own 422 so).
BODY_REFUSED: dict[str, Any] = {
    "model": InvalidRequest,
    "description": "a parameter is invalid, or the request has a body (the route takes none); nothing was done",
}


class StrictJsonRoute(APIRoute):
    """A route whose handler reads its body through `StrictJsonRequest` (FastAPI's custom request class pattern), and
    which refuses a body when it takes none (`refuse_a_body`)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        super().__init__(path, endpoint, **options)
        if self.body_field is None and 422 not in self.responses:
            # whether the route takes a body is known once it is built: built again, its 422 documented
            responses = {**(options.pop("responses", None) or {}), 422: BODY_REFUSED}
            super().__init__(path, endpoint, responses=responses, **options)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_a_body = self.body_field is not None

        async def strict_handler(request: Request) -> Response:
            strict = StrictJsonRequest(request.scope, request.receive)
            if takes_a_body:
                await refuse_a_body_not_json(strict)
            else:
                await refuse_a_body(strict)
            return await handler(strict)

        return strict_handler


async def refuse_a_body(request: Request) -> None:
    """RequestValidationError (answered 422, as FastAPI answers a body it cannot take) for a request that carries a
    body, of any content, to a route that takes none. Its content is not echoed: it may hold anything."""
    body = await request.body()
    if body:
        raise RequestValidationError([{
            "type": "body_not_allowed", "loc": ["body"],
            "msg": f"{request.method} {request.url.path} takes no body, and this request has one ({len(body)} bytes): "
                   "nothing was done; send it without one",
        }])


async def refuse_a_body_not_json(request: Request) -> None:
    """RequestValidationError (422) for a request whose body is not sent as JSON, naming the Content-Type it has."""
    content_type = request.headers.get("content-type")
    if _is_json(content_type) or not await request.body():
        return
    sent_as = f"this request's is {content_type[:MAX_ECHO_CHARS]!r}" if content_type else "this request has none"
    raise RequestValidationError([{
        "type": "content_type_not_json", "loc": ["header", "content-type"],
        "msg": f"the body must be sent as JSON, with Content-Type: application/json; {sent_as}: nothing was done",
    }])


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this Content-Type as JSON (its own test, in `fastapi.routing`)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                value = json.loads(body)
            except UnicodeDecodeError as error:
                raise json.JSONDecodeError(f"the body is not UTF-8 text ({error.reason})", "", error.start) from None
            if _holds_a_lone_surrogate(value):
                # FastAPI answers a JSONDecodeError with its 422 "JSON decode error", the reason in its ctx
                raise json.JSONDecodeError("a string holds a lone UTF-16 surrogate, which is not text", "", 0)
            self._json = value
        return self._json


def _holds_a_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
