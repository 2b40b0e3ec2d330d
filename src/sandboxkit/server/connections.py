"""uvicorn's HTTP protocols with a deadline on the request head, so slow connections get closed.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but a *new* connection that
sends its request line and headers slowly, a byte at a time (slowloris), is never closed: every
byte received resets the keep-alive timer, and before the first request there is no timer at all.
One client can so hold any number of sockets for ever.

The subclass arms one more timer when a connection opens and after each response: unless a
complete request head has arrived within ``head_timeout_s`` (whatever the bytes received), the
connection is closed. The body has its own deadline (:mod:`.admission`), and a request being
handled is never cut by this timer.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

__all__ = ["guarded_http_protocol"]


def guarded_http_protocol(http: str, head_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol class (``auto``, ``h11`` or ``httptools``) with a request-head deadline.

    Raises:
        ValueError: unknown ``http`` or a non-positive timeout.
    """
    if not head_timeout_s > 0:
        raise ValueError(f"head_timeout_s must be positive, got {head_timeout_s!r}")
    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    base: type[Any]
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    elif http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    else:
        raise ValueError(f"http must be auto, h11 or httptools, got {http!r}")

    class HeadDeadline(base):  # type: ignore[misc, valid-type]
        """Closes a connection whose next request head has not arrived within the deadline."""

        _head_timer: asyncio.TimerHandle | None = None

        def _arm_head_deadline(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(head_timeout_s, self._head_deadline_passed)

        def _head_deadline_passed(self) -> None:
            self._head_timer = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return  # a request is being handled: its head arrived in time
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    HeadDeadline.__name__ = HeadDeadline.__qualname__ = f"HeadDeadline{base.__name__}"
    return HeadDeadline
