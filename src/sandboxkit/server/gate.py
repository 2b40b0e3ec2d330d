"""The server's run slots: a hard cap on runs in flight, FIFO among waiters.

How many requests may wait is decided before their bodies are read (:mod:`.admission`, by count
and by bytes). How long they may wait is by default as long as their client waits: while a
request waits (or runs) past the heartbeat delay, the app keeps the client's read timer from
firing (see :mod:`sandboxkit.server.app`), so a slow server delays a reward but never turns it
into an error. An operator who prefers a timer sets ``queue_timeout_s``; a request that waits past
it gets 504 (or a ``SandboxError`` body once its answer has started).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

__all__ = ["Gate", "GateStatistics", "QueueTimeout"]


class QueueTimeout(Exception):
    """The request waited ``queue_timeout_s`` seconds without getting a slot."""


@dataclass(frozen=True)
class GateStatistics:
    """A snapshot of the gate."""

    in_flight: int
    waiting: int
    max_concurrency: int
    queue_timeout_s: float | None
    admitted: int
    rejected_queue_timeout: int


class Gate:
    """At most ``max_concurrency`` holders; waiters are served first come, first served.

    Raises:
        ValueError: ``max_concurrency`` is not positive, or ``queue_timeout_s`` is given and not positive.
    """

    def __init__(self, max_concurrency: int, queue_timeout_s: float | None = None) -> None:
        if max_concurrency < 1 or (queue_timeout_s is not None and not queue_timeout_s > 0):
            raise ValueError(
                f"need max_concurrency >= 1 and queue_timeout_s > 0 (or None), got {max_concurrency!r}, {queue_timeout_s!r}"
            )
        self.max_concurrency = max_concurrency
        self.queue_timeout_s = queue_timeout_s
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._waiting = 0
        self._admitted = 0
        self._timed_out = 0
        #: Called with the seconds each admitted request waited for its slot (the metrics' histogram).
        self.observe_wait: Callable[[float], None] | None = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body of the ``async with``.

        Raises:
            QueueTimeout: ``queue_timeout_s`` is set and no slot freed up within it.
            Transient: behind a broker, the supervisor is gone (:class:`~.shared.SharedGate`).
        """
        started = anyio.current_time()
        token = await self._acquire()
        self._admitted += 1
        if self.observe_wait is not None:
            self.observe_wait(anyio.current_time() - started)
        try:
            yield
        finally:
            self._release(token)

    async def _acquire(self) -> object:
        """Take a slot (waiting for it if none is free); returns what :meth:`_release` gives back."""
        token = object()
        try:
            self._limiter.acquire_on_behalf_of_nowait(token)
        except anyio.WouldBlock:
            await self._wait(lambda: self._limiter.acquire_on_behalf_of(token))
        return token

    def _release(self, token: object) -> None:
        self._limiter.release_on_behalf_of(token)

    async def _wait(self, acquire: Callable[[], Awaitable[None]]) -> None:
        """Await ``acquire()`` as a waiter, for at most ``queue_timeout_s`` (the waiting and timeout counters)."""
        self._waiting += 1
        try:
            with anyio.fail_after(self.queue_timeout_s):
                await acquire()
        except TimeoutError:
            self._timed_out += 1
            raise QueueTimeout from None
        finally:
            self._waiting -= 1

    def _in_flight(self) -> int:
        """Slots held now (by this process)."""
        return self._limiter.borrowed_tokens

    def statistics(self) -> GateStatistics:
        """Counters since start and the current occupancy (of this process's share, behind a broker)."""
        return GateStatistics(
            in_flight=self._in_flight(),
            waiting=self._waiting,
            max_concurrency=self.max_concurrency,
            queue_timeout_s=self.queue_timeout_s,
            admitted=self._admitted,
            rejected_queue_timeout=self._timed_out,
        )
