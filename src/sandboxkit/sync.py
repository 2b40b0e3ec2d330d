"""``SyncSandboxPool``: the blocking twin of :class:`~sandboxkit.pool.SandboxPool`.

It runs an ordinary ``SandboxPool`` on a private event-loop thread and forwards calls to
it, so the same pool works from a plain script, a Jupyter cell (whose own loop is
already running), TRL's reward thread, a Ray actor or verl's reward worker. All the logic
lives in the async pool; this module only carries calls across threads.

Async callers that live on *another* loop (e.g. a trainer's coroutine reward function)
use :meth:`SyncSandboxPool.submit` and ``await asyncio.wrap_future(...)``: the call runs on
the pool's loop and never touches the caller's.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sandboxkit._signals import install_sigterm_to_exit
from sandboxkit.base import Backend
from sandboxkit.errors import PoolClosed, SandboxError
from sandboxkit.limiter import Limiter
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

if TYPE_CHECKING:
    from sandboxkit.configs import BaseBackendConfig

__all__ = ["EventLoopThread", "SyncSandboxPool", "SyncSession"]

T = TypeVar("T")
_CLOSE_TIMEOUT_S = 60.0


class EventLoopThread:
    """A daemon thread running its own asyncio loop; ``call`` blocks, ``submit`` returns a future."""

    def __init__(self, name: str = "sandboxkit-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop thread."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("SyncSandboxPool cannot be called from its own loop thread; use the async pool there")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def call(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop thread and wait for its result (re-raising its exception)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in the caller: do not leave the call running
            raise

    def stop(self) -> None:
        """Stop the loop and join the thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


_live: weakref.WeakSet[SyncSandboxPool] = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    for pool in list(_live):
        try:
            pool.close(timeout=_CLOSE_TIMEOUT_S)
        except Exception:
            pass


class SyncSandboxPool:
    """Blocking twin of :class:`SandboxPool`; takes the same arguments and has the same methods.

    ``close()`` replaces ``aclose()``. It is also closed at interpreter exit if still open.
    """

    def __init__(
        self,
        backend: str | Backend | BaseBackendConfig = "subprocess",
        *,
        max_concurrency: int = 16,
        max_sandboxes: int | None = None,
        creation_rate: float | None = None,
        creation_burst: float | None = None,
        warm: int = 0,
        max_uses: int = 1000,
        retries: int = 3,
        backoff_base: float = 0.2,
        backoff_max: float = 10.0,
        deadline_s: float | None = None,
        health_check_after_s: float = 0.0,
        limits: Limits | None = None,
        backend_options: Mapping[str, Any] | None = None,
        limiter: Limiter | str = "local",
        handle_signals: bool = True,
    ) -> None:
        options: dict[str, Any] = {
            "max_concurrency": max_concurrency,
            "max_sandboxes": max_sandboxes,
            "creation_rate": creation_rate,
            "creation_burst": creation_burst,
            "warm": warm,
            "max_uses": max_uses,
            "retries": retries,
            "backoff_base": backoff_base,
            "backoff_max": backoff_max,
            "deadline_s": deadline_s,
            "health_check_after_s": health_check_after_s,
            "limits": limits,
            "backend_options": backend_options,
            "limiter": limiter,
            "handle_signals": handle_signals,
        }
        self._thread = EventLoopThread()
        try:
            self.pool: SandboxPool = self._thread.call(_construct(backend, options))
            self._thread.call(self.pool.start())
        except BaseException:
            self._thread.stop()
            raise
        if handle_signals:
            install_sigterm_to_exit()
        _live.add(self)

    @property
    def backend(self) -> Backend:
        return self.pool.backend

    @property
    def closed(self) -> bool:
        return self.pool.closed

    def __enter__(self) -> SyncSandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, coro: Awaitable[T]) -> T:
        if self._thread.loop.is_closed():
            raise PoolClosed("the pool is closed; create a new SyncSandboxPool", backend=self.pool.backend.name)
        return self._thread.call(coro)

    def submit(self, fn: Callable[[SandboxPool], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Run ``fn(async_pool)`` on the pool's loop; returns a ``concurrent.futures.Future``.

        From a coroutine on another loop: ``await asyncio.wrap_future(pool.submit(lambda p: p.run(code)))``.
        """
        if self._thread.loop.is_closed():
            raise PoolClosed("the pool is closed; create a new SyncSandboxPool", backend=self.pool.backend.name)
        return self._thread.submit(_apply(fn, self.pool))

    def run(
        self,
        code: str | RunRequest | Mapping[str, Any],
        *,
        language: str | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        fetch_files: Sequence[str] | None = None,
        limits: Limits | None = None,
        timeout: float | None = None,
        deadline_s: float | None = None,
    ) -> RunResult:
        """See :meth:`SandboxPool.run`."""
        return self._call(
            self.pool.run(
                code,
                language=language,
                stdin=stdin,
                files=files,
                fetch_files=fetch_files,
                limits=limits,
                timeout=timeout,
                deadline_s=deadline_s,
            )
        )

    def exec(
        self,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        deadline_s: float | None = None,
    ) -> ExecResult:
        """See :meth:`SandboxPool.exec`."""
        return self._call(self.pool.exec(command, env=env, stdin=stdin, timeout=timeout, deadline_s=deadline_s))

    def run_many(
        self, requests: Iterable[RunRequest | Mapping[str, Any]], *, deadline_s: float | None = None
    ) -> list[RunResult | SandboxError]:
        """See :meth:`SandboxPool.run_many`."""
        return self._call(self.pool.run_many(list(requests), deadline_s=deadline_s))

    def session(self, *, limits: Limits | None = None) -> SyncSession:
        """See :meth:`SandboxPool.session`."""
        return SyncSession(self, self.pool.session(limits=limits))

    def metrics(self) -> dict[str, Any]:
        """See :meth:`SandboxPool.metrics`."""
        return self.pool.metrics()

    def close(self, timeout: float | None = _CLOSE_TIMEOUT_S) -> None:
        """Close the pool and stop its loop thread. Idempotent."""
        if self._thread.loop.is_closed():
            return
        try:
            if not self.pool.closed:
                self._thread.call(self.pool.aclose(), timeout)
        finally:
            self._thread.stop()
            _live.discard(self)

    def __repr__(self) -> str:
        return f"<SyncSandboxPool {self.pool!r}>"


class SyncSession:
    """Blocking twin of :class:`~sandboxkit.session.Session`."""

    def __init__(self, owner: SyncSandboxPool, session: Session) -> None:
        self._owner = owner
        self.session = session

    def __enter__(self) -> SyncSession:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def sandbox_id(self) -> str | None:
        return self.session.sandbox_id

    def open(self) -> None:
        """See :meth:`Session.open`."""
        self._owner._call(self.session.open())

    def run(
        self,
        code: str | RunRequest | Mapping[str, Any],
        *,
        language: str | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        fetch_files: Sequence[str] | None = None,
        limits: Limits | None = None,
        timeout: float | None = None,
        deadline_s: float | None = None,
    ) -> RunResult:
        """See :meth:`Session.run`."""
        return self._owner._call(
            self.session.run(
                code,
                language=language,
                stdin=stdin,
                files=files,
                fetch_files=fetch_files,
                limits=limits,
                timeout=timeout,
                deadline_s=deadline_s,
            )
        )

    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        deadline_s: float | None = None,
    ) -> ExecResult:
        """See :meth:`Session.exec`."""
        return self._owner._call(
            self.session.exec(command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, deadline_s=deadline_s)
        )

    def write_files(self, files: Mapping[str, bytes | str], *, deadline_s: float | None = None) -> None:
        """See :meth:`Session.write_files`."""
        self._owner._call(self.session.write_files(files, deadline_s=deadline_s))

    def read_files(self, paths: Sequence[str], *, deadline_s: float | None = None) -> dict[str, bytes]:
        """See :meth:`Session.read_files`."""
        return self._owner._call(self.session.read_files(paths, deadline_s=deadline_s))

    def close(self) -> None:
        """See :meth:`Session.close`."""
        if not self._owner._thread.loop.is_closed():
            self._owner._call(self.session.close())


async def _construct(backend: str | Backend | BaseBackendConfig, options: dict[str, Any]) -> SandboxPool:
    # Constructed on the loop thread so every loop-bound object belongs to that loop.
    return SandboxPool(backend, **options)


async def _apply(fn: Callable[[SandboxPool], Awaitable[T]], pool: SandboxPool) -> T:
    return await fn(pool)
