"""A request the store could not serve for the moment (`state.outages`) is answered 503 with Retry-After, not
FastAPI's bare 500: the CLI then says the server's store is unavailable, agents retry as after any 5xx, and load
balancers and monitors read it as transient. The reason goes to the server's log, not to the client (it may name the
database's host). Any other error is a bug and stays a 500 with its traceback.
"""

from __future__ import annotations

import logging

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spotrun.state.outages import is_store_outage
from spotrun.state.store import driver_words

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 2
STORE_UNAVAILABLE = "the server's store is unavailable for the moment; try again"


class StoreOutages:
    """ASGI middleware: 503 for a store outage raised before the response began (after, the client sees the
    response cut short, as for any other failure mid-stream)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = False

        async def watched(message: Message) -> None:
            nonlocal began
            began = began or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            if began or not is_store_outage(error):
                raise
            log.warning("%s %s: the store is unavailable: %s", scope.get("method"), scope.get("path"),
                        driver_words(error))
            answer = JSONResponse({"detail": STORE_UNAVAILABLE}, status_code=503,
                                  headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            await answer(scope, receive, send)
