"""Admission before the body is parsed: a memory budget, a body size cap and a body deadline.

Why a middleware and not the endpoint: FastAPI reads and parses the whole JSON body before the
endpoint runs, so a limit checked in the endpoint comes after the memory is spent (40 requests of
30 MB each cost 1.5 GB before any of them was looked at). This pure-ASGI layer decides first:

* **the queue is bounded by memory, not by a timer**: a request is admitted only while fewer than
  ``max_requests`` requests (running and waiting) are in the server and their bodies together stay
  under ``max_bytes``; the declared ``Content-Length`` is reserved before a byte is read, a chunked
  body reserves as it arrives. A refused request gets **504** with ``Retry-After``: verl's reward
  client retries exactly 504, the ``sandbox-fusion`` client and sandboxkit's own client retry any
  5xx, so a refusal delays a reward, it never loses one;
* a body over ``max_body_bytes`` gets **413**, as soon as its length is known or passes the cap;
* the body must arrive within ``body_timeout_s``: a slow or lying client (a ``Content-Length`` it
  never sends) gets **408** and the connection is closed, instead of holding a slot for ever.

Before a refusal the rest of the body is read and dropped (at most ``DRAIN_BYTES`` and
``DRAIN_SECONDS``): answering while the client is still sending makes the kernel reset the
connection, and the client would see "connection reset" (which verl does not retry) instead of
the status. The budget is released when the response has been sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "DRAIN_BYTES",
    "DRAIN_SECONDS",
    "REFUSALS",
    "Admission",
    "AdmissionMiddleware",
    "AdmissionStatistics",
    "answer_early",
    "fits",
]

DRAIN_BYTES = 64 << 20
DRAIN_SECONDS = 5.0
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

#: What :class:`AdmissionMiddleware` may answer to any request with a body, for an endpoint's OpenAPI ``responses``.
REFUSALS: dict[int | str, dict[str, Any]] = {
    408: {"description": "the request body did not arrive within the server's body timeout"},
    413: {"description": "request body larger than the server's limit"},
    504: {"description": "the server holds as many requests (or body bytes) as it may; retry"},
}


@dataclass(frozen=True)
class AdmissionStatistics:
    """Occupancy and refusals since start."""

    requests: int
    bytes: int
    max_requests: int
    max_bytes: int
    admitted: int
    refused_busy: int
    refused_too_large: int
    body_timeouts: int


#: The counters and bounds an :class:`Admission` reports, each an attribute of the same name.
_STATISTICS = tuple(AdmissionStatistics.__dataclass_fields__)


class Admission:
    """The shared budget: requests and body bytes inside the server.

    Args:
        max_requests: requests (running + waiting) in the server at once.
        max_bytes: body bytes held by those requests at once.
        max_body_bytes: largest single body.
        body_timeout_s: seconds a client has to send its whole body.

    Raises:
        ValueError: a bound is not positive.
    """

    def __init__(self, max_requests: int, max_bytes: int, max_body_bytes: int, body_timeout_s: float) -> None:
        if max_requests < 1 or max_bytes < 1 or max_body_bytes < 1 or not body_timeout_s > 0:
            raise ValueError(
                "need max_requests, max_bytes, max_body_bytes >= 1 and body_timeout_s > 0, got "
                f"{max_requests!r}, {max_bytes!r}, {max_body_bytes!r}, {body_timeout_s!r}"
            )
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.requests = 0
        self.bytes = 0
        self.admitted = 0
        self.refused_busy = 0
        self.refused_too_large = 0
        self.body_timeouts = 0

    def try_reserve(self, size: int, *, new_request: bool) -> bool:
        """Take ``size`` bytes (and one request slot if ``new_request``); False if over a bound."""
        if not fits(self.requests, self.bytes, size, self.max_requests, self.max_bytes, new_request=new_request):
            return False
        self.bytes += size
        if new_request:
            self.requests += 1
        return True

    async def reserve(self, size: int, *, new_request: bool) -> bool:
        """:meth:`try_reserve`, awaitable so that a subclass may ask another process (``--workers``)."""
        return self.try_reserve(size, new_request=new_request)

    def release(self, size: int, *, request: bool) -> None:
        """Give back what :meth:`try_reserve` took."""
        self.bytes -= size
        if request:
            self.requests -= 1

    def inside(self) -> str:
        """What the server holds, for a refusal's message."""
        return f"{self.requests} requests ({self.bytes} body bytes)"

    def statistics(self) -> AdmissionStatistics:
        """A snapshot: each of :class:`AdmissionStatistics`'s fields is the attribute of that name."""
        return AdmissionStatistics(**{name: getattr(self, name) for name in _STATISTICS})


def fits(requests: int, held: int, size: int, max_requests: int, max_bytes: int, *, new_request: bool) -> bool:
    """Whether ``size`` more bytes (and a request, if ``new_request``) fit beside ``requests`` holding ``held``.

    The first request always fits, however small the byte budget: a budget below one body would
    otherwise refuse every request for ever.
    """
    if new_request and requests >= max_requests:
        return False
    return held + size <= max_bytes or (new_request and requests == 0)


class _Refused(Exception):
    def __init__(self, status: int, detail: str, drain: bool = True) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.drain = drain


class AdmissionMiddleware:
    """Admit, read (bounded in size and time) and replay a request body before the app sees it."""

    def __init__(self, app: ASGIApp, admission: Admission) -> None:
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        adm = self.admission
        declared = _content_length(scope)
        held = 0
        counted = False
        try:
            if declared is not None and declared > adm.max_body_bytes:
                adm.refused_too_large += 1
                raise _Refused(413, self._too_large(f"{declared} bytes declared"))
            if not await adm.reserve(declared or 0, new_request=True):
                adm.refused_busy += 1
                raise _Refused(504, self._busy())
            counted, held = True, declared or 0
            chunks: list[bytes] = []
            size = 0
            with anyio.move_on_after(adm.body_timeout_s) as scope_timer:
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away: nothing to answer
                    body = message.get("body", b"")
                    size += len(body)
                    if size > adm.max_body_bytes:
                        adm.refused_too_large += 1
                        raise _Refused(413, self._too_large(f"more than {adm.max_body_bytes} bytes sent"))
                    if size > held:  # chunked, or more than declared: reserve as it arrives
                        if not await adm.reserve(size - held, new_request=False):
                            adm.refused_busy += 1
                            raise _Refused(504, self._busy())
                        held = size
                    chunks.append(body)
                    if not message.get("more_body", False):
                        break
            if scope_timer.cancelled_caught:
                adm.body_timeouts += 1
                raise _Refused(
                    408,
                    f"request body not received within {adm.body_timeout_s:g}s ({size} bytes arrived"
                    + (f" of {declared} declared)" if declared is not None else ")")
                    + "; send the whole body at once, or start the server with a larger --body-timeout-s",
                    drain=False,
                )
            adm.admitted += 1
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
        except _Refused as refused:
            await _refuse(refused, receive if refused.drain else None, send)
        finally:
            if counted:
                adm.release(held, request=True)

    def _too_large(self, what: str) -> str:
        return (
            f"request body too large ({what}; this server accepts at most {self.admission.max_body_bytes} bytes); "
            "send smaller files, or start the server with a larger --max-body-mb"
        )

    def _busy(self) -> str:
        adm = self.admission
        return (
            f"server busy: {adm.inside()} already inside, the bound is "
            f"{adm.max_requests} requests / {adm.max_bytes} bytes (--max-queue, --max-queue-mb); retry later"
        )


async def _refuse(refused: _Refused, receive: Receive | None, send: Send) -> None:
    extra = [(b"retry-after", b"1")] if refused.status == 504 else []
    await answer_early(refused.status, refused.detail, receive, send, extra)


async def answer_early(
    status: int, detail: str, receive: Receive | None, send: Send, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer ``{"detail": ...}`` without running the app, and close the connection.

    What the client is still sending is read and dropped first (bounded by ``DRAIN_BYTES`` and
    ``DRAIN_SECONDS``; ``receive=None`` skips it), so it reads the status instead of a reset.
    """
    if receive is not None:
        with anyio.move_on_after(DRAIN_SECONDS):
            drained = 0
            while drained < DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                drained += len(message.get("body", b""))
                if not message.get("more_body", False):
                    break
    payload = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
                *headers,
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
