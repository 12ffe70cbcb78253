"""Request bodies larger than any the API takes are refused (413) before they are read into memory.

FastAPI reads and parses a body before the route's checks run, token check included: a 200 MB body with no token
took 6 s and 700 MiB of the server's memory to be told 401. The largest body the API takes is a job file (1,000,000
characters, which JSON may escape to 6 bytes each) or an agent's log chunk (256 KiB of text).
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 8 * 2**20


class BodyLimit:
    """ASGI middleware: 413 for a declared Content-Length over the limit, and for a streamed body once it passes it."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen, refused, answered = 0, False, False

        async def counted_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not (refused or answered):
                    refused = True
                    await self._refuse(scope, receive, send)
                    return {"type": "http.disconnect"}  # the app stops reading; what it answers is dropped
            return message

        async def unless_refused(message: Message) -> None:
            nonlocal answered
            if not refused:
                answered = True
                await send(message)

        await self.app(scope, counted_receive, unless_refused)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is over {self.max_bytes} bytes, more than any request takes"
        await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
