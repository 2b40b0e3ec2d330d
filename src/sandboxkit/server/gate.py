"""The server's admission control: a hard cap on runs in flight and a bounded, timed wait queue.

Why not just the pool's cap: the pool would let every request wait forever, and an HTTP
client that gives up after its own read timeout (verl: ``2 * timeout + 10`` s) cannot tell
"still queued" from "lost". Here a request waits at most ``queue_timeout`` seconds and at
most ``max_queue`` requests wait at once; past either bound the server answers 504 at once,
the one status verl retries (with 1 s, 2 s back-off).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

__all__ = ["Gate", "GateStatistics", "QueueFull", "QueueTimeout"]


class QueueFull(Exception):
    """Too many requests are already waiting."""


class QueueTimeout(Exception):
    """The request waited ``queue_timeout`` seconds without getting a slot."""


@dataclass(frozen=True)
class GateStatistics:
    """A snapshot of the gate."""

    in_flight: int
    waiting: int
    max_concurrency: int
    max_queue: int
    queue_timeout: float
    admitted: int
    rejected_queue_full: int
    rejected_queue_timeout: int


class Gate:
    """At most ``max_concurrency`` holders; at most ``max_queue`` waiters, each for ``queue_timeout`` s.

    Raises:
        ValueError: a bound is not positive.
    """

    def __init__(self, max_concurrency: int, max_queue: int, queue_timeout: float) -> None:
        if max_concurrency < 1 or max_queue < 0 or not queue_timeout > 0:
            raise ValueError(
                f"need max_concurrency >= 1, max_queue >= 0 and queue_timeout > 0, got "
                f"{max_concurrency!r}, {max_queue!r}, {queue_timeout!r}"
            )
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._waiting = 0
        self._admitted = 0
        self._full = 0
        self._timed_out = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body of the ``async with``.

        Raises:
            QueueFull: ``max_queue`` requests are already waiting.
            QueueTimeout: no slot freed up within ``queue_timeout`` seconds.
        """
        token = object()
        try:
            self._limiter.acquire_on_behalf_of_nowait(token)
        except anyio.WouldBlock:
            if self._waiting >= self.max_queue:
                self._full += 1
                raise QueueFull from None
            self._waiting += 1
            try:
                with anyio.fail_after(self.queue_timeout):
                    await self._limiter.acquire_on_behalf_of(token)
            except TimeoutError:
                self._timed_out += 1
                raise QueueTimeout from None
            finally:
                self._waiting -= 1
        self._admitted += 1
        try:
            yield
        finally:
            self._limiter.release_on_behalf_of(token)

    def statistics(self) -> GateStatistics:
        """Counters since start and the current occupancy."""
        return GateStatistics(
            in_flight=self._limiter.borrowed_tokens,
            waiting=self._waiting,
            max_concurrency=self.max_concurrency,
            max_queue=self.max_queue,
            queue_timeout=self.queue_timeout,
            admitted=self._admitted,
            rejected_queue_full=self._full,
            rejected_queue_timeout=self._timed_out,
        )
