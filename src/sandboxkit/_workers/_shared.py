"""The pool's one limiter, shared by the parent process and its host workers.

The parent keeps the pool's real limiter (local, Ray, or the user's) and wraps it in a
:class:`SharedLimiter`. Every owner of sandboxes goes through it: the parent's own lease
core (sessions, forks, streamed runs) directly, and each worker through its socket
(:mod:`sandboxkit._workers._remote` is the other end). So the caps hold across processes
exactly as in one: one count of calls in flight, one count of open sandboxes, one creation
bucket.

What one process does by itself, several owners must be told:

* a sandbox slot freed by one owner may be what another is waiting for: every owner that
  was refused a slot is woken (the parent's core by its ``notify``, a worker by a
  ``notify`` message);
* a refused owner may be waiting behind sandboxes another owner keeps warm but idle: one
  owner is asked to close its least recently used idle sandbox (``reclaim``), the parent's
  core first, then the worker that seems to hold the most idle ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from sandboxkit.limiter import Limiter, LimiterStatistics

if TYPE_CHECKING:
    from sandboxkit._lease import LeaseCore


class WorkerLink(Protocol):
    """What the shared limiter needs of a worker (:class:`sandboxkit._workers._set.WorkerLink`)."""

    waiting: bool
    sandboxes: dict[int, object]

    def send(self, message: tuple[Any, ...]) -> None: ...

    @property
    def idle_estimate(self) -> int: ...


__all__ = ["SharedLimiter"]


async def _nothing_idle() -> bool:
    return False


class SharedLimiter(Limiter):
    """The pool's limiter with the wake-ups and reclaims that several owners need.

    Args:
        inner: the limiter that keeps the counts.
    """

    def __init__(self, inner: Limiter) -> None:
        self.inner = inner
        self.links: list[WorkerLink] = []
        self._notify_local: Callable[[], None] = lambda: None
        self._reclaim_local: Callable[[], Awaitable[bool]] = _nothing_idle
        self._reclaiming = False
        self.local_waiting = False  # the parent's own core was refused a sandbox slot, not yet woken
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ the limiter protocol

    async def acquire_call(self, token: object) -> None:
        await self.inner.acquire_call(token)

    def release_call(self, token: object) -> None:
        self.inner.release_call(token)

    async def try_acquire_sandbox(self, token: object) -> bool:
        if await self.inner.try_acquire_sandbox(token):
            return True
        self.local_waiting = True
        self.refused(None)
        return False

    def release_sandbox(self, token: object) -> None:
        self.inner.release_sandbox(token)
        self.capacity_freed()

    async def creation_token(self) -> None:
        await self.inner.creation_token()

    def statistics(self) -> LimiterStatistics:
        return self.inner.statistics()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def penalize_creation(self, seconds: float) -> None:
        self.inner.penalize_creation(seconds)

    def attach(self, on_capacity: Callable[[], None], reclaim_idle: Callable[[], Awaitable[bool]]) -> None:
        # The parent's lease core attaches here; the inner limiter (a cluster-wide one) learns of
        # every owner in this host through us.
        self._notify_local = on_capacity
        self._reclaim_local = reclaim_idle
        self.inner.attach(self.capacity_freed, self._reclaim_somewhere)

    # ------------------------------------------------------------------ owners

    @property
    def anyone_waiting(self) -> bool:
        """Whether an owner (the parent's core or a worker) was refused a sandbox slot and not yet woken."""
        return self.local_waiting or any(link.waiting for link in self.links)

    def capacity_freed(self) -> None:
        """A slot freed somewhere: wake the parent's core and every worker that was refused one."""
        self.local_waiting = False
        self._notify_local()
        for link in self.links:
            if link.waiting:
                link.waiting = False
                link.send(("notify",))

    def refused(self, asker: WorkerLink | None) -> None:
        """``asker`` (``None``: the parent's core) was refused a sandbox slot: find it an idle one to close."""
        if asker is not None:
            asker.waiting = True
        if not self._reclaiming:
            self._reclaiming = True
            self._background(self._reclaim_for(asker))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # the loop keeps only a weak reference: an unreferenced task may vanish
        task.add_done_callback(self._tasks.discard)

    def watch_local(self, core: LeaseCore) -> None:
        """Hook the parent's own lease core: a sandbox it gets back idle goes to a worker that waits for one.

        A worker refused a slot while the parent's sessions held every sandbox learns nothing when a
        session ends: the sandbox stays warm in the parent, no slot is freed. So when the parent's core
        changes while a worker waits, the parent closes one of its idle sandboxes for it.
        """
        notify = core.notify

        def notified() -> None:
            notify()
            if core.idle and any(link.waiting for link in self.links) and not self._reclaiming:
                self._reclaiming = True
                self._background(self._reclaim_for(None, local_first=True))

        core.notify = notified  # type: ignore[method-assign]

    async def _reclaim_for(self, asker: WorkerLink | None, *, local_first: bool = False) -> None:
        try:
            if (asker is None and not local_first) or not await self._reclaim_local():
                self.ask_to_reclaim(exclude=asker)
        finally:
            self._reclaiming = False

    async def _reclaim_somewhere(self) -> bool:
        """What a cluster-wide limiter calls when another host needs a slot we keep warm."""
        if await self._reclaim_local():
            return True
        return self.ask_to_reclaim(exclude=None)

    def ask_to_reclaim(self, *, exclude: WorkerLink | None) -> bool:
        """Ask a worker to close an idle sandbox; whether one was asked.

        The worker that seems to hold the most idle ones (its sandboxes beyond its calls in flight),
        or, when none seems to, every worker that holds any: a worker with none idle now closes the
        next one that goes idle (a job's runs, unlike dispatched runs, are not counted here, and a
        sandbox in use now is idle soon).
        """
        best: WorkerLink | None = None
        for link in self.links:
            if link is not exclude and link.idle_estimate > (best.idle_estimate if best is not None else 0):
                best = link
        asked = [best] if best is not None else [link for link in self.links if link is not exclude and link.sandboxes]
        for link in asked:
            link.send(("reclaim",))
        return bool(asked)
