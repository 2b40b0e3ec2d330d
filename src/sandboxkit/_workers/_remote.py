"""The worker's side of the shared limiter and of the pool's metrics.

A worker's pool is an ordinary :class:`~sandboxkit.pool.SandboxPool` whose limiter is a
:class:`RemoteLimiter`: every slot it takes is the parent's (see
:mod:`sandboxkit._workers._shared`). A run the parent dispatched arrives with its call slot
already held, which :data:`dispatched` tells the limiter, so the common path costs no
message; a job's own runs ask for theirs. Sandbox events and a job's calls are forwarded to
the parent's metrics by :class:`ForwardingMetrics`; a dispatched run's call is counted by
the parent, which saw it whole.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from sandboxkit._workers._wire import Link
from sandboxkit.limiter import Limiter, LimiterStatistics
from sandboxkit.metrics import CallRecord, PoolMetrics

__all__ = ["Dispatched", "ForwardingMetrics", "RemoteLimiter", "dispatched"]


class Dispatched:
    """A run the parent sent with its call slot: which run, and whether that slot is in use here."""

    __slots__ = ("finished", "rid", "token")

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.token: object | None = None  # the lease core's slot object standing for the parent's slot
        self.finished = False  # the run on the sandbox returned: the next release is the parent's to make


#: Set in the task serving a dispatched run; unset in a job's tasks.
dispatched: ContextVar[Dispatched | None] = ContextVar("sandboxkit_dispatched", default=None)


class RemoteLimiter(Limiter):
    """The parent's limiter, seen from a worker.

    Args:
        link: the socket to the parent.
        creation_rate: the pool's creation rate (``None``: no bucket, so no round trip for a token).
    """

    def __init__(self, link: Link, creation_rate: float | None) -> None:
        self.link = link
        self.creation_rate = creation_rate
        self._ids = itertools.count()
        self.answers: dict[int, asyncio.Future[Any]] = {}
        self._call_ids: dict[int, int] = {}  # id(token) -> request id of a call slot granted to it
        self._sandbox_ids: dict[int, int] = {}  # id(token) -> request id of a sandbox slot granted to it
        self.on_capacity: Callable[[], None] = lambda: None
        self.reclaim_idle: Callable[[], Awaitable[bool]] | None = None

    def answered(self, tid: int, value: Any) -> None:
        """The parent answered request ``tid``."""
        future = self.answers.pop(tid, None)
        if future is not None and not future.done():
            future.set_result(value)

    async def _ask(self, kind: str, rid: int | None = None) -> tuple[int, Any]:
        tid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[tid] = future
        self.link.send((kind, tid) if kind != "acquire" else (kind, tid, rid))
        try:
            return tid, await future
        except BaseException:
            self.answers.pop(tid, None)
            if kind == "acquire":  # given up (cancelled): a grant already on its way is given back
                self.link.send(("release", tid if rid is None else None, rid))
            raise

    async def acquire_call(self, token: object) -> None:
        run = dispatched.get()
        if run is not None:
            if run.token is None:  # the slot the parent took for this run
                run.token = token
                return
            if run.token is token:  # taken again after waiting for a sandbox
                await self._ask("acquire", run.rid)
                return
        tid, _ = await self._ask("acquire")
        self._call_ids[id(token)] = tid

    def release_call(self, token: object) -> None:
        run = dispatched.get()
        if run is not None and run.token is token:
            if not run.finished:  # it waits for a sandbox: the parent's slot goes back meanwhile
                self.link.send(("release", None, run.rid))
            return
        tid = self._call_ids.pop(id(token), None)
        if tid is not None:
            self.link.send(("release", tid, None))

    async def try_acquire_sandbox(self, token: object) -> bool:
        tid, ok = await self._ask("sandbox?")
        if ok:
            self._sandbox_ids[id(token)] = tid
        return bool(ok)

    def release_sandbox(self, token: object) -> None:
        tid = self._sandbox_ids.pop(id(token), None)
        if tid is not None:
            self.link.send(("sandbox-", tid))

    async def creation_token(self) -> None:
        if self.creation_rate is not None:
            await self._ask("token")

    def statistics(self) -> LimiterStatistics:
        return LimiterStatistics(
            calls_in_flight=len(self._call_ids),
            max_calls=0,
            calls_waiting=len(self.answers),
            sandboxes_open=len(self._sandbox_ids),
            max_sandboxes=-1,
            creation_rate=self.creation_rate,
        )

    async def aclose(self) -> None:
        return None

    def penalize_creation(self, seconds: float) -> None:
        self.link.send(("penalize", seconds))

    def attach(self, on_capacity: Callable[[], None], reclaim_idle: Callable[[], Awaitable[bool]]) -> None:
        self.on_capacity = on_capacity
        self.reclaim_idle = reclaim_idle


class ForwardingMetrics(PoolMetrics):
    """A worker pool's metrics: what the parent cannot see is sent to it as well."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self.link = link

    def _forward(self, name: str, *args: Any) -> None:
        self.link.send(("metric", name, args))

    def call_finished(self, record: CallRecord, result: Any, total: float) -> None:
        super().call_finished(record, result, total)
        if dispatched.get() is None:
            status = getattr(result, "status", None)
            outcome = str(getattr(status, "value", "done"))
            self._forward("call", True, outcome, record.queue_wait, record.run_time, record.retries, total)

    def call_failed(self, record: CallRecord, exc: Exception, total: float) -> None:
        super().call_failed(record, exc, total)
        if dispatched.get() is None:
            kind = str(getattr(exc, "kind", type(exc).__name__))
            self._forward("call", False, kind, record.queue_wait, record.run_time, record.retries, total)

    def error(self, kind: str) -> None:
        super().error(kind)
        self._forward("error", kind)

    def sandbox_opened(self, seconds: float) -> None:
        super().sandbox_opened(seconds)
        self._forward("sandbox_opened", seconds)

    def sandbox_closed(self) -> None:
        super().sandbox_closed()
        self._forward("sandbox_closed")

    def checkpoint_taken(self) -> None:
        super().checkpoint_taken()
        self._forward("checkpoint_taken")

    def checkpoint_released(self) -> None:
        super().checkpoint_released()
        self._forward("checkpoint_released")

    def forked(self, sessions: int) -> None:
        super().forked(sessions)
        self._forward("forked", sessions)
