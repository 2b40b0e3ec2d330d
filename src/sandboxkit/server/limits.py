"""A pure-ASGI middleware that refuses request bodies over a size limit with 413.

A declared ``Content-Length`` over the limit is refused before a byte of the body is read.
A body without a length (chunked) is read up to the limit and refused as soon as it passes
it, so a client cannot make the server buffer an unbounded body either way.

Before answering 413 the rest of the body is read and thrown away (up to ``DRAIN_CAP``
bytes): a server that answers and closes while the client is still sending makes the
kernel reset the connection, and the client then sees "connection reset" instead of the
413 and its message.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DRAIN_CAP", "BodySizeLimit"]

DRAIN_CAP = 1 << 30


class BodySizeLimit:
    """Answer 413 to HTTP requests whose body is larger than ``max_body_bytes``."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_body_bytes:
                await self._refuse(receive, send, f"{declared} bytes declared")
                return
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        # No length: buffer up to the limit, then replay the body to the app.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # disconnect: nothing to answer
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body_bytes:
                if message.get("more_body", False):
                    await self._refuse(receive, send, f"more than {self.max_body_bytes} bytes sent")
                else:
                    await self._refuse(None, send, f"{size} bytes sent")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, receive: Receive | None, send: Send, what: str) -> None:
        drained = 0
        while receive is not None and drained < DRAIN_CAP:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        detail = (
            f"request body too large ({what}; this server accepts at most {self.max_body_bytes} bytes); "
            "send smaller files, or start the server with a larger --max-body-mb"
        )
        payload = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _content_length(scope: Scope) -> int | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
