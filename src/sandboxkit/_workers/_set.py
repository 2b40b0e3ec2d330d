"""The parent's side of the multi-process pool: its worker processes, and how calls reach them.

A :class:`WorkerSet` belongs to one :class:`~sandboxkit.pool.SandboxPool` created with
``processes > 1``. Each worker is a Python process (``python -m sandboxkit._workers._main``)
with its own event loop, its own backend and its own lease core; the parent keeps the one
limiter (:class:`~sandboxkit._workers._shared.SharedLimiter`) and the pool's guarded-call path.

A pooled run goes through the parent's :meth:`~sandboxkit._lease.LeaseCore.call`, exactly as in
one process (call slot, deadline, metrics, retries with backoff), except that "a sandbox" is
a worker chosen for the call (the one with the fewest calls in flight) and "running on it" is
one message there and one back. The call slot the parent took travels with the run: the
worker does not ask for another, and gives it back (and asks for it again) only where one
process would, while it waits for a sandbox. The worker never retries a dispatched run
itself, so the pool's retry count and backoff are the parent's alone.

Messages, parent to worker: ``init``, ``run``/``exec``/``job`` (a call with its id),
``cancel``, ``granted`` (a call slot or creation token it asked for), ``sandbox`` (the answer
to a sandbox-slot request), ``notify``, ``reclaim``, ``close``. Worker to parent: ``ready``,
``failed``, ``done``, ``acquire``/``release`` (call slots), ``sandbox?``/``sandbox-`` (sandbox
slots), ``token`` (creation), ``penalize``, ``metric``.

A worker that dies (killed, out of memory, a bug) fails its calls in flight with
:class:`WorkerLost`, a ``Transient`` error the pool retries on another worker; the slots it held
are given back, what its sandboxes left on the machine is removed with the backend's
``cleanup()``, and a new worker takes its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import anyio

from sandboxkit._lease import CLOSE_TIMEOUT_S, LeaseCore, LeaseSettings
from sandboxkit._slots import CallSlot, Entry
from sandboxkit._workers._shared import SharedLimiter
from sandboxkit._workers._spec import Recipe
from sandboxkit._workers._wire import Link, Message
from sandboxkit.errors import BackendUnavailable, InvalidRequest, PoolClosed, Transient
from sandboxkit.metrics import CallRecord

if TYPE_CHECKING:
    from sandboxkit.base import Backend, Sandbox
    from sandboxkit.limiter import Limiter
    from sandboxkit.metrics import PoolMetrics
    from sandboxkit.models import ExecResult, RunRequest, RunResult

__all__ = ["START_TIMEOUT_S", "WorkerLink", "WorkerLost", "WorkerSet"]

log = logging.getLogger("sandboxkit.pool")
T = TypeVar("T")
#: How long a new worker may take to import sandboxkit, build its backend and open its warm sandboxes.
START_TIMEOUT_S = 120.0


class PoolView(LeaseSettings, Protocol):
    """What the workers use of their :class:`~sandboxkit.pool.SandboxPool` (a protocol: the pool imports us)."""

    backend: Backend
    metrics_data: PoolMetrics
    _core: LeaseCore
    _limiter: Limiter
    warm: int
    max_concurrency: int
    closed: bool


class WorkerLost(Transient):
    """A host worker process of the pool died during the call; the pool retries it on another.

    Nothing the program in a sandbox does can end a host worker (it runs in the sandbox's own
    processes, cgroup and namespaces), so this is the infrastructure's fault, never a result.
    """

    kind = "worker_lost"


class _Call:
    """A call sent to a worker and not yet answered."""

    __slots__ = ("future", "slot")

    def __init__(self, future: asyncio.Future[Message], slot: CallSlot | None) -> None:
        self.future = future
        self.slot = slot


class WorkerLink:
    """One worker process as the parent sees it: its socket, its calls and the slots it holds."""

    def __init__(self, workers: WorkerSet, index: int) -> None:
        self.workers = workers
        self.index = index
        self.link = Link(self._received, self._lost, self._unsendable)
        self.send = self.link.send
        self.process: asyncio.subprocess.Process | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.calls: dict[int, _Call] = {}
        self.call_slots: dict[int, object] = {}  # call slots it asked for itself (its jobs' runs)
        self.sandboxes: dict[int, object] = {}  # sandbox slots it holds
        self.pending: dict[int, asyncio.Task[None]] = {}  # its requests being served
        self.waiting = False  # refused a sandbox slot, not yet woken
        self.alive = True

    @property
    def idle_estimate(self) -> int:
        """Sandboxes it holds beyond its calls in flight: about how many it keeps idle."""
        return len(self.sandboxes) - len(self.calls)

    # ------------------------------------------------------------------ receiving

    def _received(self, batch: list[Message]) -> None:
        shared = self.workers.limiter
        for message in batch:
            kind = message[0]
            if kind == "done":
                call = self.calls.pop(message[1], None)
                if call is not None and not call.future.done():
                    call.future.set_result(message)
                if shared.anyone_waiting:
                    self.send(("reclaim",))  # its sandbox just went idle; someone else needs one
            elif kind == "acquire":
                self._acquire(message[1], message[2])
            elif kind == "release":
                self._release(message[1], message[2])
            elif kind == "metric":
                self.workers.metric(message[1], message[2])
            elif kind == "sandbox?":
                self._serve(message[1], self._sandbox_slot(message[1]))
            elif kind == "sandbox-":
                token = self.sandboxes.pop(message[1], None)
                if token is not None:
                    shared.release_sandbox(token)
            elif kind == "token":
                self._serve(message[1], self._creation_token(message[1]))
            elif kind == "penalize":
                shared.penalize_creation(message[1])
            elif kind == "ready":
                if not self.ready.done():
                    self.ready.set_result(None)
            elif kind == "failed" and not self.ready.done():
                self.ready.set_exception(message[1])

    def _unsendable(self, message: Message, exc: Exception) -> None:
        """A call whose arguments cannot be pickled fails alone, as an invalid request."""
        call = self.calls.pop(message[1], None) if message[0] in ("run", "exec", "job") else None
        if call is not None and not call.future.done():
            error = InvalidRequest(
                f"the {message[0]} cannot be sent to a host worker process: {exc}",
                backend=self.workers.pool.backend.name,
            )
            call.future.set_result(("done", message[1], False, error))

    def _acquire(self, tid: int, rid: int | None) -> None:
        call = self.calls.get(rid) if rid is not None else None
        if call is not None:
            # A dispatched run gave its slot back while it waited for a sandbox and wants it again:
            # the run's own task takes it (so the caller's deadline and cancellation apply).
            if not call.future.done():
                call.future.set_result(("acquire", tid))
            return
        self._serve(tid, self._call_slot(tid))

    def _release(self, tid: int | None, rid: int | None) -> None:
        if rid is not None:
            call = self.calls.get(rid)
            if call is not None and call.slot is not None:
                call.slot.release()
            return
        assert tid is not None
        task = self.pending.pop(tid, None)
        if task is not None:
            task.cancel()  # given up before it was granted
        token = self.call_slots.pop(tid, None)
        if token is not None:
            self.workers.limiter.release_call(token)

    def _serve(self, tid: int, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.pending[tid] = task
        task.add_done_callback(lambda _: self.pending.pop(tid, None))

    async def _call_slot(self, tid: int) -> None:
        token = object()
        await self.workers.limiter.acquire_call(token)
        if not self.alive:
            self.workers.limiter.release_call(token)
            return
        self.call_slots[tid] = token
        self.send(("granted", tid))

    async def _sandbox_slot(self, tid: int) -> None:
        token = object()
        shared = self.workers.limiter
        ok = await shared.inner.try_acquire_sandbox(token)
        if ok and not self.alive:
            shared.release_sandbox(token)
            return
        if ok:
            self.sandboxes[tid] = token
        else:
            shared.refused(self)
        self.send(("sandbox", tid, ok))

    async def _creation_token(self, tid: int) -> None:
        await self.workers.limiter.creation_token()
        self.send(("granted", tid))

    # ------------------------------------------------------------------ death

    def _lost(self, exc: BaseException | None) -> None:
        """The socket closed: the worker exited or died. Fail its calls, give back what it held."""
        self.alive = False
        workers = self.workers
        if not self.ready.done():
            self.ready.set_exception(
                BackendUnavailable(f"a host worker process of the pool exited while starting ({exc!r})")
            )
        error = self.lost_error()
        for rid, call in list(self.calls.items()):
            if not call.future.done():
                call.future.set_result(("done", rid, False, error))
        self.calls.clear()
        for task in list(self.pending.values()):
            task.cancel()
        for token in self.call_slots.values():
            workers.limiter.release_call(token)
        self.call_slots.clear()
        sandboxes, self.sandboxes = list(self.sandboxes.values()), {}
        self.waiting = False
        for token in sandboxes:
            workers.limiter.release_sandbox(token)
        workers.lost(self)

    def lost_error(self) -> WorkerLost | PoolClosed:
        """What a call this worker can no longer answer raises: ``PoolClosed`` while the pool closes."""
        if self.workers.closing:
            return PoolClosed("the pool was closed during the call", backend=self.workers.pool.backend.name)
        return WorkerLost(
            f"host worker process {self.index} (pid {self.pid}) of the pool exited during the call; "
            "the pool retries the call on another worker",
            backend=self.workers.pool.backend.name,
        )

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


class _Target:
    """What the parent's lease core leases for a dispatched call: a worker, and the call slot held for it."""

    __slots__ = ("link", "slot")

    def __init__(self, link: WorkerLink, slot: CallSlot) -> None:
        self.link = link
        self.slot = slot


class WorkerSet:
    """The host worker processes of one pool, and the calls and jobs sent to them.

    Args:
        pool: the pool (its settings, metrics and lease core are used as they are).
        processes: how many workers.
        recipe: how a worker builds the pool's backend.
        limiter: the pool's limiter, wrapped so every worker shares it.
    """

    def __init__(self, pool: PoolView, processes: int, recipe: Recipe, limiter: SharedLimiter) -> None:
        self.pool = pool
        self.processes = processes
        self.recipe = recipe
        self.limiter = limiter
        self.links: list[WorkerLink] = []
        self._ids = itertools.count()
        self._changed: asyncio.Event | None = None
        self._replacing: set[asyncio.Task[None]] = set()
        self.closing = False
        self.replaced = 0

    # ------------------------------------------------------------------ lifetime

    async def start(self) -> None:
        """Start every worker (in parallel) and wait until each has its pool ready.

        Raises:
            BackendUnavailable: a worker could not start or build the backend.
        """
        self._changed = asyncio.Event()
        self.limiter.watch_local(self.pool._core)
        warm = [self.pool.warm // self.processes + (i < self.pool.warm % self.processes) for i in range(self.processes)]
        results = await asyncio.gather(
            *(self._spawn(i, warm[i]) for i in range(self.processes)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.aclose()
            raise errors[0]

    def share(self, index: int) -> int:
        """Worker ``index``'s part of ``max_sandboxes`` (at least 1): the most it keeps open.

        The limiter holds the pool's cap across all owners; the shares keep one worker's warm idle
        sandboxes from taking the slots another worker's calls wait for (a reclaim closes a warm
        sandbox, and the next call there opens a cold one), so most calls never cross workers.
        """
        cap = self.pool.max_sandboxes
        return max(1, cap // self.processes + (index < cap % self.processes))

    def _settings(self, index: int, warm: int) -> dict[str, Any]:
        pool = self.pool
        stats = self.limiter.statistics()
        return {
            "backend": self.recipe.backend,
            "backend_options": dict(self.recipe.options),
            "max_concurrency": pool.max_concurrency,
            "max_sandboxes": self.share(index),
            "warm": warm,
            "max_uses": pool.max_uses,
            "retries": pool.retries,
            "backoff_base_s": pool.backoff_base_s,
            "backoff_max_s": pool.backoff_max_s,
            "deadline_s": pool.deadline_s,
            "health_check_after_s": pool.health_check_after_s,
            "limits": pool.limits,
            "creation_rate": stats.creation_rate,
        }

    async def _spawn(self, index: int, warm: int) -> None:
        link = WorkerLink(self, index)
        ours, theirs = socket.socketpair()
        try:
            link.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "sandboxkit._workers._main",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                # Its own session: a terminal's Ctrl-C reaches the parent only, which closes the
                # workers in order; a worker whose parent vanished sees its socket close and cleans up.
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            )
        finally:
            theirs.close()
        await asyncio.get_running_loop().create_unix_connection(lambda: link.link, sock=ours)
        link.send(("init", self._settings(index, min(warm, self.share(index)))))
        self.links.append(link)
        self.limiter.links.append(link)
        try:
            with anyio.fail_after(START_TIMEOUT_S):
                await link.ready
        except TimeoutError:
            raise BackendUnavailable(
                f"a host worker process of the pool did not start within {START_TIMEOUT_S:g}s; "
                "run with processes=1 to see the backend's own error",
                backend=self.pool.backend.name,
            ) from None
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def lost(self, link: WorkerLink) -> None:
        """A worker's socket closed: drop it, remove what it left, start another unless closing."""
        with contextlib.suppress(ValueError):
            self.links.remove(link)
        with contextlib.suppress(ValueError):
            self.limiter.links.remove(link)
        if self.closing or not self._started(link):
            return  # a worker that never got ready is the start's error, raised there
        log.warning("host worker process %d (pid %s) of the pool exited; starting another", link.index, link.pid)
        task = asyncio.get_running_loop().create_task(self._replace(link))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    @staticmethod
    def _started(link: WorkerLink) -> bool:
        return link.ready.done() and not link.ready.cancelled() and link.ready.exception() is None

    async def _replace(self, link: WorkerLink) -> None:
        await self._reap(link)
        if self.closing:
            return
        self.replaced += 1
        try:
            await self._spawn(link.index, 0)
        except Exception:
            log.exception("could not start a replacement host worker process")

    async def _reap(self, link: WorkerLink) -> None:
        process = link.process
        if process is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT_S):
                await process.wait()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if process is None or process.returncode != 0:
            # A worker that did not close its pool left sandboxes behind (processes, cgroups,
            # mounts): the backend removes what belongs to owners that no longer exist.
            try:
                with anyio.move_on_after(CLOSE_TIMEOUT_S):
                    await self.pool.backend.cleanup()
            except Exception:
                log.warning("cleaning up after host worker %s failed", link.pid, exc_info=True)

    async def aclose(self) -> None:
        """Close every worker's pool and wait for the processes to exit (killed after a timeout)."""
        self.closing = True
        for task in list(self._replacing):
            task.cancel()
        links = list(self.links)
        for link in links:
            link.send(("close",))
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*(self._reap(link) for link in links), return_exceptions=True)
        for link in links:
            link.link.close()

    # ------------------------------------------------------------------ choosing a worker

    async def _pick(self) -> WorkerLink:
        while True:
            if self.closing:
                raise self.pool._core.closed_error()
            best: WorkerLink | None = None
            for link in self.links:
                if link.alive and link.ready.done() and (best is None or len(link.calls) < len(best.calls)):
                    best = link
            if best is not None:
                return best
            if not self._replacing and not self.links:
                raise BackendUnavailable(
                    "every host worker process of the pool exited and none could be started again; "
                    "see the log above, or run with processes=1 to see the backend's own error",
                    backend=self.pool.backend.name,
                )
            assert self._changed is not None
            await self._changed.wait()  # every worker is being replaced

    async def _lease(self, slot: CallSlot) -> Entry:
        link = await self._pick()
        return Entry(cast("Sandbox", _Target(link, slot)), slot)

    async def _give_back(self, entry: Entry, error: BaseException | None) -> None:
        return None  # the worker keeps (or discards) the sandbox itself

    # ------------------------------------------------------------------ calls

    async def run(self, request: RunRequest, deadline_s: float | None) -> RunResult:
        """Run ``request`` on a worker under the pool's guarded call (caps, deadline, metrics, retries)."""
        return cast("RunResult", await self._guarded("run", request, deadline_s))

    async def exec(
        self,
        command: str | Sequence[str],
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: str | None,
        timeout_s: float | None,
        deadline_s: float | None,
    ) -> ExecResult:
        """``pool.exec`` on a worker, under the pool's guarded call."""
        argv = command if isinstance(command, str) else list(command)  # plain types travel whatever was passed
        environment = dict(env) if env is not None else None
        payload = (argv, cwd, environment, stdin, timeout_s)
        return cast("ExecResult", await self._guarded("exec", payload, deadline_s))

    async def _guarded(self, kind: str, payload: Any, deadline_s: float | None) -> Any:
        async def on_worker(target: Sandbox) -> Any:
            chosen = cast("_Target", target)
            return await self._send(chosen.link, kind, payload, chosen.slot)

        return await self.pool._core.call(
            on_worker, deadline_s=deadline_s, acquire=self._lease, release=self._give_back
        )

    async def job(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(worker_pool, *args)`` in a worker, against the worker's view of this pool.

        The internal API for work bigger than one run (a grade row, a server request): ``fn`` must
        be a module-level coroutine function (it is pickled by name), its arguments and result
        picklable. Its runs share the pool's caps through the one limiter, with the pool's retries
        and default deadline, as if it ran here. A worker that dies during the job raises
        :class:`WorkerLost`; a job is not retried (it may have done part of its work).

        Raises:
            InvalidRequest: ``fn`` or an argument cannot be pickled (it cannot reach a worker).
            WorkerLost: the worker died.
            Whatever ``fn`` raised.
        """
        try:
            pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise InvalidRequest(
                f"{getattr(fn, '__qualname__', fn)!r} or its arguments cannot be sent to a host worker process: {exc}",
                backend=self.pool.backend.name,
            ) from exc
        link = await self._pick()
        return cast("T", await self._send(link, "job", (fn, args), None))

    async def _send(self, link: WorkerLink, kind: str, payload: Any, slot: CallSlot | None) -> Any:
        if not link.alive:
            raise link.lost_error()
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        call = _Call(loop.create_future(), slot)
        link.calls[rid] = call
        link.send((kind, rid, payload))
        try:
            while True:
                message = await call.future
                if message[0] == "done":
                    break
                # The worker waited for a sandbox with the slot given back, and wants it again.
                call.future = loop.create_future()
                assert slot is not None
                await slot.acquire()
                link.send(("granted", message[1]))
        except BaseException:
            if link.calls.pop(rid, None) is not None:
                link.send(("cancel", rid))
            raise
        if message[2]:
            return message[3]
        raise message[3]

    # ------------------------------------------------------------------ metrics

    def metric(self, name: str, args: tuple[Any, ...]) -> None:
        """Apply a worker's sandbox or job-call counter to the pool's metrics."""
        metrics = self.pool.metrics_data
        if name == "call":
            ok, outcome, queue_wait, run_time, retries, total = args
            record: CallRecord = metrics.call_started()
            record.queue_wait, record.run_time, record.retries = queue_wait, run_time, retries
            if ok:
                metrics.call_finished(record, _Outcome(outcome), total)
            else:
                metrics.call_failed(record, cast("Exception", _Outcome(outcome)), total)
        else:
            getattr(metrics, name)(*args)

    def add_metrics(self, data: dict[str, Any]) -> None:
        """Add the workers' sandboxes and their own state to a ``pool.metrics()`` dict."""
        data["sandboxes_open"] += sum(len(link.sandboxes) for link in self.links)
        data["sandboxes_idle"] += sum(max(0, link.idle_estimate) for link in self.links)
        data["processes"] = self.processes
        data["workers_alive"] = sum(1 for link in self.links if link.alive)
        data["workers_replaced"] = self.replaced


class _Outcome:
    """A call's status (or error kind) as a worker reported it, shaped as the metrics read it."""

    __slots__ = ("kind", "status")

    def __init__(self, outcome: str) -> None:
        self.kind = outcome
        self.status = self

    @property
    def value(self) -> str:
        return self.kind
