"""A host worker process of a multi-process pool: ``python -m sandboxkit._workers._main FD``.

It builds an ordinary pool over the backend the parent names, with the parent's limiter behind
a :class:`~sandboxkit._workers._remote.RemoteLimiter`, and serves the calls and jobs the parent
sends on socket ``FD`` (see :mod:`sandboxkit._workers._set` for the messages). When the parent
says ``close``, or its socket closes because the parent died, the worker closes its pool (its
sandboxes go with it) and exits.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from sandboxkit._workers._remote import Dispatched, ForwardingMetrics, RemoteLimiter, dispatched
from sandboxkit._workers._wire import Link, Message
from sandboxkit.base import Sandbox
from sandboxkit.errors import SandboxCrashed, SandboxkitError
from sandboxkit.pool import SandboxPool

__all__ = ["main"]


class _WorkerPool(SandboxPool):
    """The worker's pool: a dispatched run is never retried here (the parent retries it, once)."""

    @property  # type: ignore[override]
    def retries(self) -> int:
        return 0 if dispatched.get() is not None else self._retries

    @retries.setter
    def retries(self, value: int) -> None:
        self._retries = value


class _Worker:
    def __init__(self) -> None:
        self.link = Link(self._received, self._lost, self._unsendable)
        self.limiter: RemoteLimiter | None = None
        self.pool: _WorkerPool | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.stop = asyncio.Event()
        self.owed = False  # a reclaim asked for when nothing was idle
        self.background: set[asyncio.Task[None]] = set()
        self._core_notify: Callable[[], None] = lambda: None

    async def serve(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        await loop.create_unix_connection(lambda: self.link, sock=socket.socket(fileno=fd))
        await self.stop.wait()
        for task in list(self.tasks.values()):
            task.cancel()
        if self.pool is not None:
            await self.pool.aclose()
        self.link.close()

    # ------------------------------------------------------------------ messages

    def _received(self, batch: list[Message]) -> None:
        for message in batch:
            kind = message[0]
            if kind == "run":
                self._start(message[1], self._run(message[1], message[2]))
            elif kind == "granted":
                assert self.limiter is not None
                self.limiter.answered(message[1], None)
            elif kind == "sandbox":
                assert self.limiter is not None
                self.limiter.answered(message[1], message[2])
            elif kind == "cancel":
                task = self.tasks.get(message[1])
                if task is not None:
                    task.cancel()
            elif kind == "exec":
                self._start(message[1], self._exec(message[1], *message[2]))
            elif kind == "job":
                self._start(message[1], self._job(message[1], *message[2]))
            elif kind == "notify":
                if self.pool is not None:
                    self.pool._core.notify()
            elif kind == "reclaim":
                if self.pool is not None:
                    self._background(self._reclaim())
            elif kind == "init":
                self._background(self._init(message[1]))
            elif kind == "close":
                self.stop.set()

    async def _reclaim(self) -> None:
        """Close an idle sandbox for another owner; with none idle now, the next one that goes idle."""
        assert self.pool is not None
        if not await self.pool._core.reclaim_idle():
            self.owed = True

    def _notified(self) -> None:
        """The worker's core changed (a sandbox went idle, say): pay a reclaim owed to another owner."""
        self._core_notify()
        if self.owed and self.pool is not None and self.pool._core.idle:
            self.owed = False
            self._background(self._reclaim())

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)  # the loop keeps only a weak reference: an unreferenced task may vanish
        task.add_done_callback(self.background.discard)

    def _unsendable(self, message: Message, exc: Exception) -> None:
        """A result that cannot be pickled reaches the parent as the error it is."""
        if message[0] == "done":
            error = SandboxCrashed(f"a host worker process could not send its result back: {exc}; please report it")
            self.link.send(("done", message[1], False, error))

    def _lost(self, exc: BaseException | None) -> None:
        self.stop.set()  # the parent closed the socket or died: close the pool and exit

    def _start(self, rid: int, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks[rid] = task
        task.add_done_callback(lambda _: self.tasks.pop(rid, None))

    def _reply(self, rid: int, ok: bool, value: Any) -> None:
        if not ok:
            value = _picklable(value)
        self.link.send(("done", rid, ok, value))

    # ------------------------------------------------------------------ work

    async def _init(self, settings: dict[str, Any]) -> None:
        try:
            self.limiter = RemoteLimiter(self.link, settings.pop("creation_rate"))
            backend = settings.pop("backend")
            self.pool = _WorkerPool(backend, limiter=self.limiter, processes=1, handle_signals=False, **settings)
            self.pool.metrics_data = self.pool._core.metrics = ForwardingMetrics(self.link)
            self._core_notify = self.pool._core.notify
            self.pool._core.notify = self._notified  # type: ignore[method-assign]
            await self.pool.start()
        except BaseException as exc:
            self.link.send(("failed", _picklable(exc)))
            self.stop.set()
            if not isinstance(exc, Exception):
                raise
            return
        self.link.send(("ready",))

    async def _run(self, rid: int, request: Any) -> None:
        run = Dispatched(rid)
        dispatched.set(run)

        async def on_sandbox(sandbox: Sandbox) -> Any:
            result = await sandbox.run(request)
            run.finished = True
            return result

        assert self.pool is not None
        await self._answer(rid, self.pool._core.call(on_sandbox, deadline_s=math.inf))  # the parent holds the deadline

    async def _exec(
        self, rid: int, command: Any, cwd: str | None, env: Any, stdin: str | None, timeout_s: float | None
    ) -> None:
        run = Dispatched(rid)
        dispatched.set(run)

        async def on_sandbox(sandbox: Sandbox) -> Any:
            result = await sandbox.exec(command, cwd=cwd, env=env, stdin=stdin, timeout=timeout_s)
            run.finished = True
            return result

        assert self.pool is not None
        await self._answer(rid, self.pool._core.call(on_sandbox, deadline_s=math.inf))

    async def _job(self, rid: int, fn: Any, args: tuple[Any, ...]) -> None:
        await self._answer(rid, _awaited(fn, self.pool, *args))  # a result that cannot travel: _unsendable answers

    async def _answer(self, rid: int, work: Awaitable[Any]) -> None:
        """Reply to call ``rid`` with what ``work`` returns or raises (a cancellation is the parent's: no answer).

        The one reply path of runs, execs and jobs; for a run it replaces a frame rather than adding
        one (the pool's guarded call is created by the caller and awaited here).
        """
        try:
            result = await work
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._reply(rid, False, exc)
        else:
            self._reply(rid, True, result)


async def _awaited(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``await fn(*args)``, so that ``fn`` raising before it returns an awaitable is an answer too."""
    return await fn(*args)


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives the wire, else a ``SandboxCrashed`` that names it (a bug to report)."""
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        backend = exc.backend if isinstance(exc, SandboxkitError) else None
        return SandboxCrashed(
            f"a host worker process raised {type(exc).__name__}: {exc}; this is a bug, please report it",
            backend=backend,
        )


def main(argv: list[str] | None = None) -> int:
    """Serve the parent on the socket whose descriptor is the first argument."""
    from sandboxkit.sync import _private_loop

    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when its workers stop
    loop = _private_loop()
    try:
        loop.run_until_complete(_Worker().serve(int(args[0])))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
