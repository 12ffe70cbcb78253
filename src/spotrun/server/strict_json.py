"""Request bodies whose JSON holds a lone UTF-16 surrogate ("\\ud800": valid JSON, but no text UTF-8 can carry) are
refused 422 as JSON that cannot be read. They passed validation, then failed where the text was written: a 500 from
the database, from the log's encoding, or from the 422 reply that echoed them back. So are bodies that are not
UTF-8 (nor UTF-16 or -32) at all, which FastAPI answered with a 400 the API's schema does not list."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


class StrictJsonRoute(APIRoute):
    """A route whose handler reads its body through `StrictJsonRequest` (FastAPI's custom request class pattern)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler


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
