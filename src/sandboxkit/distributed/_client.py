"""``RayLimiter``: the pool's :class:`~sandboxkit.limiter.Limiter`, backed by the limiter actor.

How one process talks to the actor, and why:

* **Batched messages.** Releases, cancels and new call requests made during one turn of
  the event loop go out as one ``post``; a burst of 50 calls is one round trip, not 50.
* **One long poll.** While the process holds or waits for anything, one ``poll`` call is
  always outstanding at the actor. It returns the moment a grant (or a recall) is ready,
  so a waiting call starts half a round trip after a slot frees anywhere in the cluster.
  It is also the heartbeat that keeps this process's leases alive.
* **A lease cache.** A released call slot is kept for ``linger_s`` while no other
  process is waiting, and reused without any round trip; it is handed back at once when
  the actor reports that another process waits (FIFO fairness first), and when idle.
  The slot still counts against the cluster cap while cached, so the cap always holds.
* **Awaitable ObjectRefs only.** Every call is ``await actor.method.remote(...)``; nothing
  blocks the pool's event loop (the one blocking lookup runs in a worker thread).

The connection, the batching and the poll live in :mod:`sandboxkit.distributed._link`
(:class:`~sandboxkit.distributed._link.ActorLink`, the base class); this module keeps the
books: call slots and the lease cache, sandbox slots, reclaiming idle sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from sandboxkit.distributed._core import LimiterConfig
from sandboxkit.distributed._link import ActorLink
from sandboxkit.errors import PoolClosed, Transient
from sandboxkit.limiter import Limiter, LimiterStatistics

__all__ = ["NAMESPACE", "RayLimiter"]

log = logging.getLogger("sandboxkit.distributed")

NAMESPACE = "sandboxkit"
UNREGISTER_TIMEOUT_S = 5.0
CREDIT_LINGER_S = 0.05  # how long a sandbox slot granted after a refusal waits for the pool to take it


@dataclass
class _Waiter:
    token: object
    future: asyncio.Future[None]


class RayLimiter(ActorLink, Limiter):
    """Caps on calls in flight and open sandboxes, and the creation bucket, held cluster-wide.

    Every ``RayLimiter`` with the same ``name`` (in any driver, task or actor of the
    cluster) shares one limiter actor, so ``max_calls`` is the cap for the whole cluster,
    not per process. Use it through ``SandboxPool(..., limiter="ray")`` or pass an instance
    as ``limiter=``. It runs on the asyncio loop of the pool that uses it (one loop per
    instance; a ``SyncSandboxPool`` provides one), and never blocks that loop.

    Args:
        max_calls: calls in flight across the cluster.
        max_sandboxes: sandboxes open across the cluster (``None``: no cap).
        creation_rate: sandbox creations per second across the cluster (``None``: unlimited).
        creation_burst: creations allowed at once before the rate applies.
        name: the limiter actor's name; pools sharing a name share the caps.
        namespace: Ray namespace of the actor.
        lease_ttl_s: a process silent for this long loses its leases (a dead process loses
            them sooner, as soon as the actor sees it is gone).
        worker_max_calls: an extra cap on this process's own calls in flight (``None``: none).
        linger_s: how long a released call slot is kept for reuse while nobody else waits
            (0 disables the lease cache).
        idle_exit_s: the actor exits after this long without any user.
        label: a name for this process in the actor's statistics and logs.

    Raises:
        ValueError: a limit is out of range.
    """

    def __init__(
        self,
        max_calls: int,
        max_sandboxes: int | None = None,
        creation_rate: float | None = None,
        creation_burst: float | None = None,
        *,
        name: str = "sandboxkit-limiter",
        namespace: str = NAMESPACE,
        lease_ttl_s: float = 30.0,
        worker_max_calls: int | None = None,
        linger_s: float = 0.05,
        idle_exit_s: float = 600.0,
        label: str = "",
    ) -> None:
        super().__init__(
            LimiterConfig(max_calls, max_sandboxes, creation_rate, creation_burst, lease_ttl_s),
            name=name,
            namespace=namespace,
            idle_exit_s=idle_exit_s,
            label=label,
            owner=uuid.uuid4().hex,
        )
        self.linger_s = max(0.0, linger_s)
        self._local_cap = anyio.CapacityLimiter(worker_max_calls) if worker_max_calls else None
        self._seq = itertools.count()
        self._held = 0  # call slots granted to this process and not handed back
        self._busy: set[object] = set()
        self._waiters: deque[_Waiter] = deque()
        self._pending: dict[str, None] = {}  # request ids queued at the actor, oldest first
        self._contended = True  # until the actor says otherwise: no local hand-offs
        self._keep = 0  # slots we may hold and reuse locally, as last told by the actor
        self._sandboxes: set[object] = set()
        self._sandbox_waiting = False
        self._sandbox_credit = 0  # sandbox slots granted after a refusal, not used yet
        self._reclaim_owed = 0
        self._linger_handle: asyncio.TimerHandle | None = None
        self._last_release = 0.0
        self._reclaim_task: asyncio.Task[None] | None = None
        self._on_capacity: Callable[[], None] | None = None
        self._reclaim_idle: Callable[[], Awaitable[bool]] | None = None

    # ------------------------------------------------------------------ pool hooks

    def penalize_creation(self, seconds: float) -> None:
        """The service answered 429 to a creation: drain the cluster's creation bucket (fire and forget)."""
        if self._actor is not None and seconds > 0:
            self._actor.penalize.remote(float(seconds))

    def attach(self, on_capacity: Callable[[], None], reclaim_idle: Callable[[], Awaitable[bool]]) -> None:
        """Called by the pool: how to wake its waiters, and how to close one of its idle sandboxes.

        The sandbox cap is shared, so a pool may be refused a sandbox while *other* workers
        keep idle ones warm. The actor then asks the biggest holder to close an idle sandbox
        (``reclaim_idle``) and wakes the refused pool (``on_capacity``) once a slot is free.
        """
        self._on_capacity = on_capacity
        self._reclaim_idle = reclaim_idle

    # ------------------------------------------------------------------ Limiter protocol

    async def acquire_call(self, token: object) -> None:
        """Wait for a call slot (cluster-wide FIFO)."""
        await self._ensure_connected()
        if self._local_cap is not None:
            await self._local_cap.acquire_on_behalf_of(token)
        try:
            if self._spare() > 0 and not self._waiters and self._may_keep():
                self._busy.add(token)  # lease cache hit: no round trip
                return
            assert self._loop is not None
            waiter = _Waiter(token, self._loop.create_future())
            self._waiters.append(waiter)
            self._request_more()
            try:
                await waiter.future
            except asyncio.CancelledError:
                if waiter.future.done() and not waiter.future.cancelled():
                    self._busy.discard(token)  # granted just as we were cancelled: give it back
                    self._settle_spares()
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                    self._trim_requests()
                raise
        except BaseException:
            if self._local_cap is not None:
                self._local_cap.release_on_behalf_of(token)
            raise

    def release_call(self, token: object) -> None:
        """Give a call slot back (kept for reuse if nobody else in the cluster waits)."""
        if token not in self._busy:
            return
        self._busy.discard(token)
        if self._local_cap is not None:
            self._local_cap.release_on_behalf_of(token)
        self._last_release = time.monotonic()
        if self._reclaim_owed:
            self._start_reclaim()  # the pool has just put a sandbox back to idle
        self._settle_spares()

    async def try_acquire_sandbox(self, token: object) -> bool:
        """Take a cluster sandbox slot if one is free now; never waits for one.

        Raises:
            Transient: the limiter actor could not be reached (the pool retries).
        """
        actor = await self._ensure_connected()
        if self._sandbox_credit > 0:  # a slot the actor handed us after an earlier refusal
            self._sandbox_credit -= 1
            self._sandboxes.add(token)
            return True
        call = asyncio.ensure_future(self._await_ref(actor.try_sandbox.remote(self.owner, self._holdings())))
        try:
            granted = await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(self._release_if_granted)
            raise
        except Exception as exc:
            self._on_actor_error(exc)
            raise Transient(f"the Ray limiter {self.name!r} could not be reached: {exc}") from exc
        if not granted and self._sandbox_credit > 0:
            # The slot we were queued for arrived (in a poll reply) before this refusal was read.
            self._sandbox_credit -= 1
            granted = True
        if granted:
            self._sandboxes.add(token)
            self._sandbox_waiting = False
        else:
            self._sandbox_waiting = True
        self._ensure_poller()
        return bool(granted)

    def _release_if_granted(self, call: asyncio.Future[Any]) -> None:
        if not call.cancelled() and call.exception() is None and call.result():
            self._out.sandbox_releases += 1
            self._schedule_flush()

    def _return_sandbox_credit(self) -> None:
        if self._sandbox_credit > 0:  # the pool found an idle sandbox meanwhile
            self._out.sandbox_releases += self._sandbox_credit
            self._sandbox_credit = 0
            self._schedule_flush()

    def release_sandbox(self, token: object) -> None:
        """Give a sandbox slot back (the sandbox was closed)."""
        if token in self._sandboxes:
            self._sandboxes.discard(token)
            self._out.sandbox_releases += 1
            self._schedule_flush()

    async def creation_token(self) -> None:
        """Wait for the cluster's creation bucket (tokens are reserved in arrival order).

        Raises:
            Transient: the limiter actor could not be reached.
        """
        actor = await self._ensure_connected()
        if self.cluster_config.creation_rate is None:
            return
        try:
            delay = await actor.creation_delay.remote(self.owner)
        except Exception as exc:
            self._on_actor_error(exc)
            raise Transient(f"the Ray limiter {self.name!r} could not be reached: {exc}") from exc
        if delay > 0:
            await asyncio.sleep(delay)

    def statistics(self) -> LimiterStatistics:
        """This process's view: its own calls in flight and waiting, against the cluster caps."""
        cfg = self.cluster_config
        return LimiterStatistics(
            calls_in_flight=len(self._busy),
            max_calls=cfg.max_calls,
            calls_waiting=len(self._waiters),
            sandboxes_open=len(self._sandboxes),
            max_sandboxes=cfg.max_sandboxes if cfg.max_sandboxes is not None else -1,
            creation_rate=cfg.creation_rate,
        )

    async def cluster_statistics(self) -> dict[str, Any]:
        """The actor's view: cluster-wide usage, queue length and every process's holdings."""
        actor = await self._ensure_connected()
        stats: dict[str, Any] = await actor.statistics.remote()
        return stats

    async def aclose(self) -> None:
        """Hand every lease back and leave. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._linger_handle is not None:
            self._linger_handle.cancel()
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_exception(PoolClosed(f"the Ray limiter {self.name!r} was closed"))
        self._waiters.clear()
        for task in (self._poller, self._reclaim_task, self._connecting, *self._tasks):
            if task is not None and not task.done():
                task.cancel()
        if self._actor is not None:
            try:
                await asyncio.wait_for(self._await_ref(self._actor.unregister.remote(self.owner)), UNREGISTER_TIMEOUT_S)
            except Exception:  # the actor reclaims our leases by itself when we are gone
                log.debug("unregistering from limiter %s failed", self.name, exc_info=True)
        self._held = 0

    def __repr__(self) -> str:
        return f"RayLimiter(name={self.name!r}, {self.statistics()!r})"

    def _holdings(self) -> tuple[int, int]:
        """What the actor should count for us if it must adopt us: releases it has not seen are still ours."""
        return (
            self._held + self._out.releases + self._inflight[0],
            len(self._sandboxes) + self._sandbox_credit + self._out.sandbox_releases + self._inflight[1],
        )

    # ------------------------------------------------------------------ call slots

    def _spare(self) -> int:
        return self._held - len(self._busy)

    def _request_more(self) -> None:
        live = sum(1 for w in self._waiters if not w.future.done())
        cap = self.cluster_config.max_calls
        while live > len(self._pending) + max(0, self._spare()) and len(self._pending) < cap:
            rid = f"{self.owner}.{next(self._seq)}"
            self._pending[rid] = None
            self._out.requests.append(rid)
        self._schedule_flush()
        self._ensure_poller()

    def _trim_requests(self) -> None:
        live = sum(1 for w in self._waiters if not w.future.done())
        while len(self._pending) > live:
            rid = next(reversed(self._pending))  # the newest has the worst place in the queue
            del self._pending[rid]
            if rid in self._out.requests:
                self._out.requests.remove(rid)
            else:
                self._out.cancels.append(rid)
        self._schedule_flush()

    def _serve_waiters(self) -> None:
        while self._waiters and self._spare() > 0:
            waiter = self._waiters.popleft()
            if waiter.future.done():
                continue
            self._busy.add(waiter.token)
            waiter.future.set_result(None)
        self._trim_requests()
        if self._waiters:
            self._request_more()

    def _may_keep(self) -> bool:
        """Whether a released slot may serve this process's next call without asking the actor."""
        return self._held <= self._keep

    def _settle_spares(self) -> None:
        """Decide what happens to unused slots: serve our waiters, keep them a while, or give them back.

        While another process waits, only our fair share may be reused locally; slots above
        it go back to the actor, which hands them out in request order.
        """
        spare = self._spare()
        if spare <= 0:
            return
        if self._closed:
            self._give_back(spare)
        elif self._waiters:
            excess = min(spare, max(0, self._held - self._keep))
            if excess:
                self._give_back(excess)
            self._serve_waiters()
        elif self._contended or self.linger_s <= 0:
            self._give_back(spare)
        else:
            self._arm_linger()

    def _give_back(self, n: int) -> None:
        self._held -= n
        self._out.releases += n
        self._schedule_flush()

    def _arm_linger(self) -> None:
        if self._linger_handle is None and self._loop is not None:
            self._linger_handle = self._loop.call_later(self.linger_s, self._linger_fired)

    def _linger_fired(self) -> None:
        self._linger_handle = None
        idle_for = time.monotonic() - self._last_release
        if self._spare() <= 0:
            return
        if idle_for < self.linger_s and not self._contended:
            assert self._loop is not None
            self._linger_handle = self._loop.call_later(self.linger_s - idle_for, self._linger_fired)
        elif not self._waiters:
            self._give_back(self._spare())

    def _needs_poll(self) -> bool:
        return bool(
            self._pending
            or self._held
            or self._sandboxes
            or self._sandbox_credit
            or self._sandbox_waiting
            or self._reclaim_owed
        )

    def _on_connected(self) -> None:
        if self._pending:  # after a reconnect: the queue may be gone (requests are idempotent)
            self._out.requests[:0] = [r for r in self._pending if r not in self._out.requests]

    def _on_disconnected(self) -> None:
        self._contended = True

    def _handle_reply(self, reply: dict[str, Any]) -> None:
        if self._closed:
            return
        if reply.get("need_ref"):
            self._need_ref = True
        self._contended = bool(reply["contended"])
        self._keep = int(reply.get("keep", 0))
        granted = reply["granted"]
        if granted:
            for rid in granted:
                self._pending.pop(rid, None)  # a grant for a cancelled request becomes a spare slot
            self._held += len(granted)
        self._serve_waiters()
        self._settle_spares()
        if reply.get("reclaim"):
            self._reclaim_owed += int(reply["reclaim"])
        elif not reply.get("sandbox_wanted", True):
            self._reclaim_owed = 0
        if self._reclaim_owed:
            self._start_reclaim()
        if reply.get("sandbox_grants"):
            self._sandbox_waiting = False
            self._sandbox_credit += int(reply["sandbox_grants"])
            assert self._loop is not None
            self._loop.call_later(CREDIT_LINGER_S, self._return_sandbox_credit)
            if self._on_capacity is not None:
                self._on_capacity()  # the pool retries its open and takes the slot
        self._ensure_poller()

    # ------------------------------------------------------------------ sandbox reclaim

    def _start_reclaim(self) -> None:
        if self._reclaim_idle is None or self._reclaim_task is not None or self._reclaim_owed <= 0:
            return
        assert self._loop is not None
        self._reclaim_task = self._loop.create_task(self._reclaim_loop())

    async def _reclaim_loop(self) -> None:
        assert self._reclaim_idle is not None
        try:
            while self._reclaim_owed > 0 and not self._closed:
                if not await self._reclaim_idle():
                    break  # nothing idle now; retried when a call ends
                self._reclaim_owed -= 1
        except Exception:
            log.warning("closing an idle sandbox for another worker failed", exc_info=True)
        finally:
            self._reclaim_task = None
