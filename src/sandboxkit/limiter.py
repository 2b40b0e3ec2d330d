"""Concurrency caps and the sandbox-creation token bucket, behind one small interface.

The pool asks a :class:`Limiter` for three things: a slot for a call in flight, a slot
for an open sandbox, and a token before creating a sandbox. It also tells the limiter two
things, through methods with no-op defaults: that the service answered 429 on a creation
(:meth:`Limiter.penalize_creation`), and how to wake the pool or take an idle sandbox back
(:meth:`Limiter.attach`, which only a shared limiter needs). :class:`LocalLimiter` keeps
them in this process (anyio ``CapacityLimiter`` s, which hand a token back when a task is
cancelled after being granted one). ``sandboxkit.distributed`` provides one backed by a
Ray actor, so the caps hold across every worker of a cluster.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Limiter", "LimiterStatistics", "LocalLimiter", "TokenBucket"]


@dataclass(frozen=True)
class LimiterStatistics:
    """A snapshot of a limiter's state."""

    calls_in_flight: int
    max_calls: int
    calls_waiting: int
    sandboxes_open: int
    max_sandboxes: int
    creation_rate: float | None


@runtime_checkable
class Limiter(Protocol):
    """What the pool needs from a limiter. Every ``acquire`` has a matching ``release``.

    Tokens are opaque objects chosen by the caller; a release names the token it acquired.
    Subclass it to inherit the no-op defaults of :meth:`penalize_creation` and :meth:`attach`;
    the pool calls both unconditionally, so a limiter states what it does with them instead
    of the pool probing for attributes.
    """

    async def acquire_call(self, token: object) -> None:
        """Wait for a call slot."""

    def release_call(self, token: object) -> None:
        """Give a call slot back."""

    async def try_acquire_sandbox(self, token: object) -> bool:
        """Take a sandbox slot if one is free now; never waits."""

    def release_sandbox(self, token: object) -> None:
        """Give a sandbox slot back (the sandbox was closed)."""

    async def creation_token(self) -> None:
        """Wait until creating one more sandbox stays within the creation rate."""

    def statistics(self) -> LimiterStatistics:
        """A snapshot for metrics."""

    async def aclose(self) -> None:
        """Release anything the limiter holds (remote leases). Idempotent."""

    def penalize_creation(self, seconds: float) -> None:
        """The service answered 429 to a creation: hold every creation back for ``seconds``.

        One caller backing off alone does not help when a burst of callers shares the
        account's rate limit; draining the shared bucket slows all of them. Default: no-op
        (a limiter without a creation rate has nothing to slow down).
        """
        return None

    def attach(self, on_capacity: Callable[[], None], reclaim_idle: Callable[[], Awaitable[bool]]) -> None:
        """Called once by the pool: how to wake its waiters, and how to close one of its idle sandboxes.

        A limiter shared with other processes uses them when a slot frees elsewhere
        (``on_capacity``) or when another process needs a sandbox slot this pool keeps warm
        (``reclaim_idle`` returns whether it closed one). Default: no-op (a local limiter
        learns about every change from the pool itself).
        """
        return None


class TokenBucket:
    """A token bucket: ``rate`` tokens per second, up to ``burst`` saved. FIFO among waiters.

    ``rate=None`` means unlimited. Waiters are served strictly in arrival order (a lock
    around the wait), so a burst of callers cannot starve an early one.
    """

    def __init__(self, rate: float | None, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        if rate is not None and rate <= 0:
            raise ValueError(f"creation rate must be positive or None, got {rate!r}")
        self.rate = rate
        self.burst = float(burst if burst is not None else max(1.0, rate or 1.0))
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self._tokens = self.burst
        self._clock = clock
        self._last = clock()
        self._lock = anyio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        assert self.rate is not None
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    async def acquire(self) -> None:
        """Wait for one token."""
        if self.rate is None:
            return
        async with self._lock:
            self._refill()
            while self._tokens < 1:
                await anyio.sleep((1 - self._tokens) / self.rate)
                self._refill()
            self._tokens -= 1

    def penalize(self, seconds: float) -> None:
        """Drain the bucket for ``seconds`` (the service said 429: slow everyone down, not one caller)."""
        if self.rate is None or seconds <= 0:
            return
        self._refill()
        self._tokens = min(self._tokens, -seconds * self.rate + 1)


class LocalLimiter(Limiter):
    """In-process caps on calls in flight and open sandboxes, plus the creation bucket."""

    def __init__(
        self,
        max_calls: int,
        max_sandboxes: int | None = None,
        creation_rate: float | None = None,
        creation_burst: float | None = None,
    ) -> None:
        if max_calls < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_calls!r}")
        self._calls = anyio.CapacityLimiter(max_calls)
        self._max_sandboxes = max_sandboxes if max_sandboxes is not None else math.inf
        if self._max_sandboxes < 1:
            raise ValueError(f"max_sandboxes must be >= 1, got {max_sandboxes!r}")
        self._sandboxes: set[object] = set()
        self.bucket = TokenBucket(creation_rate, creation_burst)

    async def acquire_call(self, token: object) -> None:
        # A free slot is taken at once: anyio's ``acquire_on_behalf_of`` yields to the loop even
        # then, one more wake-up of the host per pooled run (issue 30). ``nowait`` refuses while
        # anyone is queued, so waiting callers keep their order.
        try:
            self._calls.acquire_on_behalf_of_nowait(token)
        except anyio.WouldBlock:
            await self._calls.acquire_on_behalf_of(token)

    def release_call(self, token: object) -> None:
        self._calls.release_on_behalf_of(token)

    async def try_acquire_sandbox(self, token: object) -> bool:
        if len(self._sandboxes) >= self._max_sandboxes:
            return False
        self._sandboxes.add(token)
        return True

    def release_sandbox(self, token: object) -> None:
        self._sandboxes.discard(token)

    async def creation_token(self) -> None:
        await self.bucket.acquire()

    def statistics(self) -> LimiterStatistics:
        stats = self._calls.statistics()
        return LimiterStatistics(
            calls_in_flight=stats.borrowed_tokens,
            max_calls=int(stats.total_tokens),
            calls_waiting=stats.tasks_waiting,
            sandboxes_open=len(self._sandboxes),
            max_sandboxes=int(self._max_sandboxes) if self._max_sandboxes != math.inf else -1,
            creation_rate=self.bucket.rate,
        )

    async def aclose(self) -> None:
        return None

    def penalize_creation(self, seconds: float) -> None:
        self.bucket.penalize(seconds)

    def __repr__(self) -> str:
        return f"LocalLimiter({self.statistics()!r})"
