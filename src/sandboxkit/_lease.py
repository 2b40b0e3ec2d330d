"""The lease core under :class:`~sandboxkit.pool.SandboxPool` and :class:`~sandboxkit.session.Session`.

One object owns the sandboxes of a pool (open, idle, in use), the limiter and the wake-ups,
and one guarded-call path (call slot, deadline, metrics, retries) serves both pooled calls
and session calls. Keeping both in one place is what makes their rules the same: a session
honours the pool's default deadline, the liveness check is written once, and nobody waits
for a sandbox while sitting on a call slot, which is what makes sessions and pooled calls
unable to deadlock each other:

* a call slot is only *held* while a sandbox is in use, or while one is being leased without
  waiting; a caller that has to wait for a sandbox gives its slot back first;
* a sandbox held by a session between calls holds no call slot;
* so every holder of a call slot is either running or about to get a sandbox, and the
  sessions holding every sandbox always get call slots to finish their turns.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import anyio

from sandboxkit._capacity import LearnedCapacity
from sandboxkit._slots import CallSlot, Entry
from sandboxkit._started import Started
from sandboxkit.base import Backend, Sandbox, Snapshot
from sandboxkit.errors import (
    CapacityExceeded,
    DeadlineExceeded,
    InvalidRequest,
    PoolClosed,
    RateLimited,
    SandboxCrashed,
    SandboxkitError,
    SandboxLost,
    Transient,
)
from sandboxkit.limiter import Limiter
from sandboxkit.metrics import CallRecord, PoolMetrics
from sandboxkit.models import Limits

__all__ = ["CLOSE_TIMEOUT_S", "LeaseCore", "keeps_sandbox"]

log = logging.getLogger("sandboxkit.pool")
T = TypeVar("T")
CLOSE_TIMEOUT_S = 30.0


def keeps_sandbox(exc: BaseException) -> bool:
    """Whether a sandbox is still fit for use after ``exc`` interrupted a call on it.

    Only the caller's own mistake qualifies: an ``InvalidRequest`` (a bad path, a file too
    large) is rejected before or without touching the sandbox's processes, so its files and
    state are intact. Anything else (a crash, a transient fault, a deadline, a cancellation,
    a backend bug) leaves the sandbox in a state nobody can vouch for.
    """
    return isinstance(exc, InvalidRequest)


class Releasable(Protocol):
    """What the core needs of a :class:`~sandboxkit.checkpoint.Checkpoint`: a way to free it when the pool closes.

    Named here rather than imported, so ``checkpoint`` (which registers itself with a core) and
    this module do not import each other.
    """

    async def release(self) -> None: ...


class LeaseSettings(Protocol):
    """The settings of a :class:`~sandboxkit.pool.SandboxPool` that the lease core reads.

    Attributes:
        limits: limits of the sandboxes opened for pooled calls.
        max_sandboxes: the pool's own sandbox cap (the learned cap never exceeds it).
        max_suspended: suspended session sandboxes held at once, beside the running ones.
        max_uses: pooled runs before a sandbox is recycled.
        retries: retries of a call after a ``Transient`` error.
        backoff_base_s: first backoff in seconds; doubles per retry, full jitter.
        backoff_max_s: cap on one backoff.
        deadline_s: default deadline of one call (pooled or in a session).
        health_check_after_s: idle time after which a sandbox is checked with ``alive()`` before lease.
    """

    limits: Limits
    max_sandboxes: int
    max_suspended: int
    max_uses: int
    retries: int
    backoff_base_s: float
    backoff_max_s: float
    deadline_s: float | None
    health_check_after_s: float


class LeaseCore:
    """The sandboxes of one pool, its limiter and its wake-ups, and the one guarded-call path.

    Args:
        backend: where sandboxes come from.
        limiter: caps on calls and sandboxes, and the creation bucket.
        metrics: where calls and sandbox openings are counted.
        settings: the pool's settings, read where they are used (the pool is the one place that
            validates and holds them, so the two cannot disagree).
        on_first_use: awaited before the first call (the pool's ``start``).
    """

    def __init__(
        self,
        backend: Backend,
        limiter: Limiter,
        metrics: PoolMetrics,
        settings: LeaseSettings,
        *,
        on_first_use: Callable[[], Awaitable[None]],
    ) -> None:
        self.backend = backend
        self.limiter = limiter
        self.metrics = metrics
        self.settings = settings
        self.capacity = LearnedCapacity(settings.max_sandboxes)
        self.entries: set[Entry] = set()
        self.idle: deque[Entry] = deque()
        #: Session sandboxes suspended (see :meth:`park`): in ``entries``, but holding no running slot.
        self.suspended: set[Entry] = set()
        #: Checkpoints taken through this pool and not released (released when the pool closes).
        self.checkpoints: set[Releasable] = set()
        self.closed = False
        self.started = False
        self._on_first_use = on_first_use
        self._opening = 0
        self._waiting = 0  # callers waiting for a sandbox: the demand that makes a learned cap grow
        self._generation = 0  # bumped by every change; a waiter that saw an old value does not sleep
        self._changed: anyio.Event | None = None
        limiter.attach(self.notify, self.reclaim_idle)

    # ------------------------------------------------------------------ wake-ups

    def notify(self) -> None:
        """Something changed (a sandbox was given back, closed, or a slot freed elsewhere): wake waiters."""
        self._generation += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_for_change(self, seen: int) -> None:
        if self._generation != seen:
            return  # it changed while we were deciding to wait
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def _wait_for_room(self, seen: int, slot: CallSlot | None) -> None:
        """Wait for a change as a caller that needs a sandbox, its call slot given back meanwhile."""
        if slot is not None:
            slot.release()
        self._waiting += 1
        try:
            await self._wait_for_change(seen)
        finally:
            self._waiting -= 1
        if slot is not None:
            await slot.acquire()

    def check_open(self) -> None:
        """Raise ``PoolClosed`` if the pool is closed."""
        if self.closed:
            raise self.closed_error()

    def closed_error(self) -> PoolClosed:
        """What a call on the closed pool raises, here and in its host workers' dispatch."""
        return PoolClosed("the pool is closed; create a new SandboxPool", backend=self.backend.name)

    # ------------------------------------------------------------------ leasing

    async def lease(
        self, limits: Limits | None = None, *, slot: CallSlot | None = None, snapshot: Snapshot | None = None
    ) -> Entry:
        """A healthy sandbox: an idle one, a new one, or one freed later (waits as long as needed).

        Args:
            limits: the limits the sandbox must have been opened with (a session's); ``None``
                takes any idle sandbox and opens new ones with the pool's limits.
            slot: the call slot the caller holds, given back while it waits for a sandbox.
            snapshot: the sandbox starts from this checkpoint (a fork): a new sandbox opened
                from it, or, where ``capabilities.fork_warm``, an idle one (with these limits)
                into which it is loaded, so no container or runner starts cold.

        Raises:
            PoolClosed: the pool closed.
            Transient, BackendUnavailable, ...: opening a sandbox failed (a capacity refusal
                while this pool holds sandboxes is not an error: the call waits for one of them).
        """
        # A fork may start in an idle sandbox where the backend can load a checkpoint into one;
        # after one failed load it opens a new sandbox (a released checkpoint must not empty the pool).
        warm_fork = snapshot is not None and self.backend.capabilities.fork_warm
        while True:
            self.check_open()
            seen = self._generation
            # A warm idle sandbox first (LIFO: the most recently used is the warmest); for a session,
            # one opened with its limits. A reset sandbox is as clean as a new one and far cheaper.
            if snapshot is not None and not warm_fork:
                entry = None  # a fork is a new sandbox from the checkpoint, never a warm empty one
            elif limits is None:
                entry = self.idle.pop() if self.idle else None
            else:
                entry = next((e for e in reversed(self.idle) if e.limits == limits), None)
                if entry is not None:
                    self.idle.remove(entry)
            if entry is not None:
                idle_for = time.monotonic() - entry.last_used
                if idle_for < self.settings.health_check_after_s or await entry.sandbox.alive():
                    if snapshot is None or await self._restore(entry, snapshot):
                        return entry
                    warm_fork = False
                    continue
                self.metrics.error("dead_on_lease")
                await self.discard(entry)
                continue
            entry = await self._open(limits, snapshot)
            if entry is not None:
                return entry
            if self.idle:
                # Cap reached and the idle sandboxes do not fit these limits: close the least recently
                # used to make room (nothing else would ever free a slot for us).
                await self.discard(self.idle[0])
                continue
            await self._wait_for_room(seen, slot)

    async def _restore(self, entry: Entry, snapshot: Snapshot) -> bool:
        """Load a checkpoint into a warm idle sandbox (a fork); on failure the sandbox is discarded."""
        try:
            restored = await entry.sandbox.restore(snapshot)
        except BaseException:  # cancelled half-way: the sandbox holds part of the files
            await self.discard(entry)
            raise
        if not restored:
            self.metrics.error("restore_failed")
            await self.discard(entry)  # its state is unknown; the next attempt opens a new sandbox
        return restored

    async def lease_retrying(self, limits: Limits | None = None, snapshot: Snapshot | None = None) -> Entry:
        """:meth:`lease` with the pool's retries on ``Transient`` errors (a session opening its sandbox)."""
        attempt = 0
        while True:
            try:
                return await self.lease(limits, snapshot=snapshot)
            except Transient as exc:
                delay = self._retry_delay(attempt, exc, may_retry=True)
                attempt += 1
            await anyio.sleep(delay)

    async def _open(self, limits: Limits | None, snapshot: Snapshot | None = None) -> Entry | None:
        """Open a sandbox if the caps allow; None if a cap (ours, the limiter's, the service's) is reached."""
        if self.running + self._opening >= self.capacity.cap:
            return None
        token = object()
        if not await self.limiter.try_acquire_sandbox(token):
            return None
        limits = limits or self.settings.limits
        self._opening += 1
        try:
            await self.limiter.creation_token()
            started = time.perf_counter()
            if snapshot is None:
                sandbox = await self.backend.open(limits)
            else:
                sandbox = await self.backend.open_from(snapshot, limits)
        except BaseException as exc:
            self._opening -= 1
            self.limiter.release_sandbox(token)
            self.notify()
            if isinstance(exc, CapacityExceeded):
                held = self.running + self._opening
                self.capacity.refused(held)
                log.info(
                    "%s refused a sandbox at %d held: sandbox cap now %d", self.backend.name, held, self.capacity.cap
                )
                if held > 0:
                    return None  # one of ours will free up: wait for it, do not spend a retry
            elif isinstance(exc, RateLimited):
                self.limiter.penalize_creation(exc.retry_after or self.settings.backoff_base_s)
            raise
        self._opening -= 1
        if self.closed:  # closed while we were opening: do not leak it
            with anyio.CancelScope(shield=True):
                await _close_quietly(sandbox)
            self.limiter.release_sandbox(token)
            raise PoolClosed("the pool was closed while a sandbox was opening", backend=self.backend.name)
        self.metrics.sandbox_opened(time.perf_counter() - started)
        entry = Entry(sandbox, token, limits)
        self.entries.add(entry)
        return entry

    async def prewarm(self) -> None:
        """Open one sandbox with the pool's limits and keep it idle (``warm=``)."""
        entry = await self._open(None)
        if entry is not None:
            self.idle.append(entry)

    async def give_back(self, entry: Entry, *, dirty: bool) -> None:
        """Return a sandbox after use: reset and keep it warm, or close it (used up, over the cap, closed)."""
        entry.uses += 1
        entry.last_used = time.monotonic()
        keep = not self.closed and entry.uses < self.settings.max_uses and self.running <= self.capacity.cap
        if keep and dirty:
            keep = self.backend.capabilities.resettable and await _reset_quietly(entry.sandbox)
        if keep and not self.closed:
            self.idle.append(entry)
            self.notify()
        else:
            await self.discard(entry)

    async def discard(self, entry: Entry) -> None:
        """Close a sandbox and free its slot. Idempotent, and finishes under cancellation."""
        if entry.closed:
            return
        entry.closed = True
        with anyio.CancelScope(shield=True):
            try:
                await _close_quietly(entry.sandbox)
            finally:
                self.entries.discard(entry)
                try:
                    self.idle.remove(entry)
                except ValueError:
                    pass
                if entry in self.suspended:
                    self.suspended.discard(entry)  # its running slot was given back when it was parked
                else:
                    self.limiter.release_sandbox(entry.slot)
                self.metrics.sandbox_closed()
                self.notify()

    # ------------------------------------------------------------------ suspended sandboxes

    @property
    def running(self) -> int:
        """Sandboxes that count against ``max_sandboxes``: all but the suspended ones."""
        return len(self.entries) - len(self.suspended)

    def may_park(self) -> bool:
        """Whether one more session sandbox may be suspended (``max_suspended`` not reached)."""
        return len(self.suspended) < self.settings.max_suspended

    def park(self, entry: Entry) -> None:
        """A session's sandbox was suspended: it gives its running slot back and counts as suspended.

        So suspended sessions never block running calls; ``max_suspended`` bounds them instead.
        """
        if entry not in self.suspended:
            self.suspended.add(entry)
            self.limiter.release_sandbox(entry.slot)
            self.notify()

    async def unpark(self, entry: Entry, slot: CallSlot | None = None) -> None:
        """Take a running slot back for a parked sandbox about to resume; waits for room as a lease does.

        An idle sandbox is closed to make room (a resumed session is a caller like any other).

        Raises:
            PoolClosed: the pool closed while it waited.
        """
        while entry in self.suspended:
            self.check_open()
            seen = self._generation
            if self.running + self._opening < self.capacity.cap and await self.limiter.try_acquire_sandbox(entry.slot):
                self.suspended.discard(entry)
                return
            if self.idle:
                await self.discard(self.idle[0])
                continue
            await self._wait_for_room(seen, slot)

    async def reclaim_idle(self) -> bool:
        """Close the least recently used idle sandbox (a shared limiter needs its slot elsewhere)."""
        if not self.idle:
            return False
        await self.discard(self.idle[0])
        return True

    async def close_all(self) -> None:
        """Close every sandbox, in use or idle (the pool is closing)."""
        self.closed = True
        self.notify()
        entries = list(self.entries)
        self.idle.clear()
        async with anyio.create_task_group() as tg:
            for entry in entries:
                tg.start_soon(self.discard, entry)
            for checkpoint in list(self.checkpoints):
                tg.start_soon(checkpoint.release)

    # ------------------------------------------------------------------ the guarded call

    async def call(
        self,
        fn: Callable[[Sandbox], Awaitable[T]],
        *,
        deadline_s: float | None,
        acquire: Callable[[CallSlot], Awaitable[Entry]] | None = None,
        release: Callable[[Entry, BaseException | None], Awaitable[None]] | None = None,
        retry_started: bool = True,
        what: str = "call",
    ) -> T:
        """Run ``fn`` on a sandbox under a call slot, the deadline, metrics and retries.

        Args:
            fn: the operation on the sandbox.
            deadline_s: deadline of the whole call, queue wait and retries included
                (``None``: the pool's default).
            acquire: how to get the sandbox while holding ``slot`` (default: a pooled
                :meth:`lease`; a session passes its own sandbox).
            release: what to do with the sandbox after ``fn``, given the error that ended it
                or ``None`` (default: a pooled sandbox is reset and kept, or discarded when
                the error leaves its state unknown).
            retry_started: whether a ``Transient`` error raised by ``fn`` itself is retried
                (pooled runs are; a session's turn is not, since its state may have changed).
                Errors before ``fn`` starts (opening the sandbox) are always retried.
            what: how the deadline error names the call.

        Raises:
            DeadlineExceeded: the deadline passed (never a program ``timeout`` status).
            PoolClosed: the pool closed.
            SandboxError: what ``fn`` or the backend raised, after the retries.
        """
        self.check_open()
        if not self.started:
            await self._on_first_use()
        started = time.perf_counter()
        record = self.metrics.call_started()
        deadline_s = self.settings.deadline_s if deadline_s is None else deadline_s
        try:
            if deadline_s is None:
                result = await self._attempts(fn, record, acquire, release, retry_started, what)
            else:
                with anyio.move_on_after(deadline_s) as scope:
                    result = await self._attempts(fn, record, acquire, release, retry_started, what)
                if scope.cancelled_caught:
                    raise self._deadline_exceeded(deadline_s, what)
        except SandboxkitError as exc:  # a rejected request counts as a failed call too
            self.metrics.call_failed(record, exc, time.perf_counter() - started)
            raise
        self.metrics.call_finished(record, result, time.perf_counter() - started)
        return result

    async def _attempts(
        self,
        fn: Callable[[Sandbox], Awaitable[T]],
        record: CallRecord,
        acquire: Callable[[CallSlot], Awaitable[Entry]] | None,
        release: Callable[[Entry, BaseException | None], Awaitable[None]] | None,
        retry_started: bool,
        what: str,
    ) -> T:
        # The hot path of every call: written out rather than layered, since each coroutine layer
        # costs about a microsecond per call.
        attempt = 0
        while True:
            ran = False
            slot = CallSlot(self.limiter)
            queued = time.perf_counter()
            await slot.acquire()
            try:
                entry = await (self.lease(None, slot=slot) if acquire is None else acquire(slot))
                record.queue_wait += time.perf_counter() - queued
                ran = True
                run_started = time.perf_counter()
                try:
                    result = await fn(entry.sandbox)
                except BaseException as exc:
                    await (self._release_pooled(entry, exc) if release is None else release(entry, exc))
                    if isinstance(exc, SandboxCrashed) and self.closed:
                        raise PoolClosed(f"the pool was closed during the {what}", backend=self.backend.name) from exc
                    if isinstance(exc, SandboxLost):  # dead on lease, found by the call: nothing ran
                        self.metrics.error("dead_on_lease")
                        continue
                    raise
                record.run_time += time.perf_counter() - run_started
                if self._waiting and self.capacity.refusals:
                    self.capacity.succeeded()  # grow only while the cap holds callers back
                await (self.give_back(entry, dirty=True) if release is None else release(entry, None))
                return result
            except Transient as exc:
                delay = self._retry_delay(attempt, exc, may_retry=retry_started or not ran)
                attempt += 1
                record.retries += 1
            finally:
                slot.release()
            await anyio.sleep(delay)  # outside the call slot: a backing-off caller does not hold capacity

    async def _release_pooled(self, entry: Entry, error: BaseException) -> None:
        # A pooled sandbox is reset before its next (unrelated) run anyway; it is only closed when
        # the error leaves its state unknown.
        if keeps_sandbox(error):
            await self.give_back(entry, dirty=True)
        else:
            await self.discard(entry)

    async def within_deadline(self, op: Callable[[], Awaitable[T]], deadline_s: float | None, what: str) -> T:
        """Run ``op`` under ``deadline_s`` (``None``: the pool's default; still ``None``: no deadline).

        Raises:
            DeadlineExceeded: the deadline passed.
        """
        deadline_s = self.settings.deadline_s if deadline_s is None else deadline_s
        if deadline_s is None:
            return await op()
        with anyio.move_on_after(deadline_s):
            return await op()
        raise self._deadline_exceeded(deadline_s, what)

    def _deadline_exceeded(self, deadline_s: float, what: str) -> DeadlineExceeded:
        # An infrastructure error by design: a call that waited in a queue or behind a slow service
        # must reach the trainer as "no reward", never as the program's ``timeout``.
        return DeadlineExceeded(
            f"{what} did not finish within its deadline of {deadline_s:g}s (queue wait and retries included); "
            "this is an infrastructure timeout, not the program's: raise deadline_s or max_concurrency, "
            "or lower the load",
            backend=self.backend.name,
        )

    async def ensure_started(self) -> None:
        """Run the pool's start-up (warm sandboxes, signal handler) before its first use."""
        if not self.started:
            await self._on_first_use()

    def _retry_delay(self, attempt: int, exc: Transient, *, may_retry: bool) -> float:
        """The backoff before retry ``attempt + 1``, or re-raise ``exc`` when no retry is left or allowed."""
        if attempt >= self.settings.retries or self.closed or not may_retry:
            raise exc
        delay = self.backoff(attempt, exc)
        log.info("retrying after %s (attempt %d/%d, in %.2fs)", exc, attempt + 1, self.settings.retries, delay)
        return delay

    def backoff(self, attempt: int, exc: Exception) -> float:
        """Seconds to wait before retry ``attempt + 1``; at least the service's ``Retry-After``."""
        ceiling = min(self.settings.backoff_max_s, self.settings.backoff_base_s * (2**attempt))
        delay = random.uniform(0, ceiling)  # full jitter: retries of a burst spread out
        if isinstance(exc, RateLimited) and exc.retry_after:
            delay = max(delay, min(exc.retry_after, self.settings.backoff_max_s))
        return delay

    def check_language(self, language: str) -> None:
        """Raise ``InvalidRequest`` if the backend cannot run ``language``."""
        langs = self.backend.capabilities.languages
        if language not in langs:
            raise InvalidRequest(
                f"backend {self.backend.name!r} cannot run {language!r}; it supports: {', '.join(sorted(langs))}",
                backend=self.backend.name,
            )


async def _close_quietly(sandbox: Sandbox) -> None:
    try:
        with anyio.move_on_after(CLOSE_TIMEOUT_S):
            await sandbox.close()
    except Exception:
        log.warning("closing sandbox %s failed", getattr(sandbox, "id", "?"), exc_info=True)


async def _reset_quietly(sandbox: Sandbox) -> bool:
    try:
        if getattr(sandbox, "reset_steps_inline", False):
            # The timeout only for a reset that waits; the subprocess backend's never does. Only for a
            # sandbox that says so: a reset holding a cancel scope across its first wait (Docker's)
            # would then sit outside the pool's timeout scope, which anyio refuses (``_started``).
            reset = Started(sandbox.reset())
            if reset.done:
                return bool(reset.result)
            with anyio.move_on_after(CLOSE_TIMEOUT_S):
                return await reset
            return False
        with anyio.move_on_after(CLOSE_TIMEOUT_S):
            return await sandbox.reset()
        return False
    except Exception:
        log.warning("resetting sandbox %s failed; closing it", getattr(sandbox, "id", "?"), exc_info=True)
        return False
