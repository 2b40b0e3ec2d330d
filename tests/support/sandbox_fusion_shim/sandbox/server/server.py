"""``app``: an ASGI app that forwards every request to the live ``sandboxkit serve`` at ``$SANDBOXKIT_SF_URL``.

Sandbox Fusion's tests wrap ``app`` in FastAPI's ``TestClient``; forwarding (rather than sandboxkit's app
in-process) makes them exercise the real server: its sockets, workers and limits.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

#: Sandbox Fusion's tests give some requests minutes (cell and compile timeouts); the server enforces its own.
TIMEOUT_S = 600.0


#: Headers that described the upstream body as sent, not the decoded body forwarded here.
_HOP = {"content-length", "content-encoding", "transfer-encoding", "connection"}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")]
    url = os.environ["SANDBOXKIT_SF_URL"] + scope["path"]
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        response = await client.request(scope["method"], url, content=body, headers=headers)
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": [(k.encode(), v.encode()) for k, v in response.headers.items() if k.lower() not in _HOP]
            + [(b"content-length", str(len(response.content)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": response.content})
