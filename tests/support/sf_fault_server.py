"""A loopback HTTP/1.1 server that injects faults in front of a real ``sandboxkit serve``.

Raw asyncio streams rather than an ASGI app, because the faults that matter live below
HTTP: a TCP reset (``SO_LINGER`` 0), a connection closed without an answer, a stall.

For every ``POST /run_code``, ``plan(code, attempt)`` names what to do with the ``attempt``-th
request (1-based) carrying that ``code``; ``"ok"`` proxies it to the upstream server:

* ``"ok"`` -- forward to upstream, return its answer
* ``"500"``, ``"502"``, ``"503"``, ``"504"``, ``"422"``, ``"404"`` -- that status, a short JSON body
* ``"429"`` -- 429 with ``Retry-After: 0.05``
* ``"reset"`` -- TCP RST after reading the request
* ``"close"`` -- close the connection without answering
* ``"stall"`` -- answer nothing for ``stall_s`` seconds, then close
* ``"sandbox_error"`` -- HTTP 200 with ``{"status": "SandboxError", ...}``
* ``"garbage"`` -- HTTP 200 with an HTML body
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections import Counter
from collections.abc import Callable

import httpx

Plan = Callable[[str, int], str]

_REASONS = {
    200: "OK",
    404: "Not Found",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class FaultServer:
    """``async with FaultServer(upstream, plan) as fs: fs.url``."""

    def __init__(self, upstream: str, plan: Plan, *, stall_s: float = 10.0) -> None:
        self.upstream = upstream
        self.plan = plan
        self.stall_s = stall_s
        self.attempts: Counter[str] = Counter()
        self.actions: Counter[str] = Counter()
        self.connections = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FaultServer:
        self._client = httpx.AsyncClient(timeout=60)
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._client is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        await self._client.aclose()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection is finished."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if method == "GET" and path.endswith("/v1/ping"):
            await self._send(writer, 200, b'"pong"')
            return True
        code = str(json.loads(body).get("code", "")) if body else ""
        self.attempts[code] += 1
        action = self.plan(code, self.attempts[code])
        self.actions[action] += 1
        if action == "ok":
            assert self._client is not None
            upstream = await self._client.post(
                f"{self.upstream}/run_code", content=body, headers={"content-type": "application/json"}
            )
            await self._send(writer, upstream.status_code, upstream.content)
        elif action.isdigit():
            extra = {"Retry-After": "0.05"} if action == "429" else {}
            await self._send(writer, int(action), json.dumps({"detail": f"injected {action}"}).encode(), extra)
        elif action == "sandbox_error":
            payload = {
                "status": "SandboxError",
                "message": "injected: runner crashed",
                "compile_result": None,
                "run_result": None,
                "executor_pod_name": None,
                "files": {},
            }
            await self._send(writer, 200, json.dumps(payload).encode())
        elif action == "garbage":
            await self._send(writer, 200, b"<html>proxy error</html>", content_type="text/html")
        elif action == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        elif action == "close":
            writer.close()
            return False
        elif action == "stall":
            await asyncio.sleep(self.stall_s)
            return False
        else:
            raise AssertionError(f"unknown fault action {action!r}")
        return True

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        extra: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
