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
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from sandboxkit._request import renamed
from sandboxkit._signals import install_sigterm_to_exit
from sandboxkit.base import Backend
from sandboxkit.checkpoint import Checkpoint
from sandboxkit.errors import PoolClosed
from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["EventLoopThread", "SyncCheckpoint", "SyncSandboxPool", "SyncSession"]

T = TypeVar("T")
P = ParamSpec("P")
_CLOSE_TIMEOUT_S = 60.0


def _private_loop() -> asyncio.AbstractEventLoop:
    """A new loop for sandboxkit's own thread: uvloop's when installed, unless ``SANDBOXKIT_LOOP=asyncio``.

    Nobody else runs code on this loop, so its kind is sandboxkit's choice: uvloop costs the host
    about a fifth less CPU per pooled run (docs/benchmarks.md, "Scale"). The variable is the way
    back should a uvloop difference ever matter.
    """
    if os.environ.get("SANDBOXKIT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


class EventLoopThread:
    """A daemon thread running its own event loop; ``call`` blocks, ``submit`` returns a future."""

    def __init__(self, name: str = "sandboxkit-loop") -> None:
        self.loop = _private_loop()
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
            pool.close(_CLOSE_TIMEOUT_S)
        except Exception:
            pass


class _Twin:
    """What a generated blocking method needs: the async object and a way to run a coroutine."""

    def _async_twin(self) -> Any:
        raise NotImplementedError

    def _call(self, coro: Awaitable[T]) -> T:
        raise NotImplementedError


def _blocking(method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[_Twin, P], T]:
    """The blocking twin of an async method: same parameters, same docstring, runs on the loop thread.

    Writing each twin by hand re-declared every async signature, and the copies drifted (a
    keyword added to the async method but not to its twin). Generated from the async method,
    the twin cannot drift: ``P`` carries the exact parameters to type checkers and IDEs, and
    ``functools.wraps`` gives ``inspect.signature``/``help()`` the async method's signature.
    The call goes through ``getattr`` so a subclass's override of the async method is honoured.
    """
    name = method.__name__

    @functools.wraps(method)
    def blocking(self: _Twin, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._call(getattr(self._async_twin(), name)(*args, **kwargs))
        return result

    blocking.__module__ = __name__
    return blocking


def _same_parameters(
    model: Callable[Concatenate[Any, P], None],
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], None]]:
    """Give a ``*args, **kwargs`` forwarder the exact signature of ``model`` (typed and at runtime).

    ``SyncSandboxPool(**options)`` used to hide the options from ``help()`` and type checkers;
    re-declaring them all by hand was a second copy to keep in step with ``SandboxPool``.
    """

    def decorate(fn: Callable[..., None]) -> Callable[Concatenate[Any, P], None]:
        wrapped: Callable[Concatenate[Any, P], None] = functools.wraps(model, assigned=("__annotations__",))(fn)
        return wrapped

    return decorate


class SyncSandboxPool(_Twin):
    """Blocking twin of :class:`SandboxPool`; takes the same arguments and has the same methods.

    ``close()`` replaces ``aclose()``. It is also closed at interpreter exit if still open.
    ``run``, ``exec`` and ``run_many`` are the async methods (same parameters and docstrings),
    run on the pool's loop thread: anything they call back (e.g. an output callback) runs on
    that thread, not the caller's.
    """

    @_same_parameters(SandboxPool.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._thread = EventLoopThread()
        try:
            self.pool: SandboxPool = self._thread.call(_construct(args, kwargs))
            self._thread.call(self.pool.start())
        except BaseException:
            self._thread.stop()
            raise
        if self.pool.handle_signals:
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

    def _async_twin(self) -> SandboxPool:
        return self.pool

    def _closed(self) -> PoolClosed:
        """What a call raises once :meth:`close` has stopped the loop thread."""
        return PoolClosed("the pool is closed; create a new SyncSandboxPool", backend=self.pool.backend.name)

    def _call(self, coro: Awaitable[T]) -> T:
        if self._thread.loop.is_closed():
            raise self._closed()
        return self._thread.call(coro)

    def submit(self, fn: Callable[[SandboxPool], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Run ``fn(async_pool)`` on the pool's loop; returns a ``concurrent.futures.Future``.

        From a coroutine on another loop: ``await asyncio.wrap_future(pool.submit(lambda p: p.run(code)))``.
        """
        if self._thread.loop.is_closed():
            raise self._closed()
        return self._thread.submit(_apply(fn, self.pool))

    run = _blocking(SandboxPool.run)
    exec = _blocking(SandboxPool.exec)
    run_many = _blocking(SandboxPool.run_many)

    def session(self, *, limits: Limits | None = None, from_checkpoint: Checkpoint | None = None) -> SyncSession:
        """See :meth:`SandboxPool.session` (``from_checkpoint`` takes a :class:`SyncCheckpoint` too)."""
        return SyncSession(self, self.pool.session(limits=limits, from_checkpoint=_unwrap(from_checkpoint)))

    def fork(
        self,
        source: Checkpoint | Session,
        n: int,
        *,
        limits: Limits | None = None,
        deadline_s: float | None = None,
    ) -> list[SyncSession]:
        """See :meth:`SandboxPool.fork` (``source`` takes a :class:`SyncCheckpoint` or :class:`SyncSession` too)."""
        sessions = self._call(self.pool.fork(_unwrap(source), n, limits=limits, deadline_s=deadline_s))
        return [SyncSession(self, s) for s in sessions]

    def metrics(self) -> dict[str, Any]:
        """See :meth:`SandboxPool.metrics`."""
        return self.pool.metrics()

    def close(self, timeout_s: float | None = _CLOSE_TIMEOUT_S, *, timeout: float | None = None) -> None:
        """Close the pool and stop its loop thread. Idempotent.

        Args:
            timeout_s: how long to wait for the sandboxes to close (None: as long as it takes).
            timeout: the deprecated old name of ``timeout_s``.
        """
        if timeout is not None:
            timeout_s = renamed(None, timeout, "timeout", where="SyncSandboxPool.close")
        if self._thread.loop.is_closed():
            return
        try:
            if not self.pool.closed:
                self._thread.call(self.pool.aclose(), timeout_s)
        finally:
            self._thread.stop()
            _live.discard(self)

    def __repr__(self) -> str:
        return f"<SyncSandboxPool {self.pool!r}>"


class SyncSession(_Twin):
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

    def _async_twin(self) -> Session:
        return self.session

    def _call(self, coro: Awaitable[T]) -> T:
        return self._owner._call(coro)

    open = _blocking(Session.open)

    def checkpoint(
        self,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        deadline_s: float | None = None,
    ) -> SyncCheckpoint:
        """See :meth:`Session.checkpoint`; ``with`` the result, or call its ``release()``."""
        return SyncCheckpoint(self._owner, self._call(self.session.checkpoint(cwd=cwd, env=env, deadline_s=deadline_s)))

    run = _blocking(Session.run)
    exec = _blocking(Session.exec)
    python = _blocking(Session.python)
    write_files = _blocking(Session.write_files)
    read_files = _blocking(Session.read_files)
    suspend = _blocking(Session.suspend)
    resume = _blocking(Session.resume)

    def close(self) -> None:
        """See :meth:`Session.close`."""
        if not self._owner._thread.loop.is_closed():
            self._owner._call(self.session.close())


class SyncCheckpoint:
    """Blocking twin of :class:`~sandboxkit.checkpoint.Checkpoint` (``with`` it, or ``release()``)."""

    def __init__(self, owner: SyncSandboxPool, checkpoint: Checkpoint) -> None:
        self._owner = owner
        self.checkpoint = checkpoint

    @property
    def id(self) -> str:
        return self.checkpoint.id

    @property
    def released(self) -> bool:
        return self.checkpoint.released

    def __enter__(self) -> SyncCheckpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        """See :meth:`Checkpoint.release`."""
        if not self._owner._thread.loop.is_closed():
            self._owner._call(self.checkpoint.release())

    def __repr__(self) -> str:
        return f"<SyncCheckpoint {self.checkpoint!r}>"


def _unwrap(source: Any) -> Any:
    """The async object behind a sync twin (a checkpoint or a session), or ``source`` itself."""
    if isinstance(source, SyncCheckpoint):
        return source.checkpoint
    if isinstance(source, SyncSession):
        return source.session
    return source


async def _construct(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SandboxPool:
    # Constructed on the loop thread so every loop-bound object belongs to that loop.
    return SandboxPool(*args, **kwargs)


async def _apply(fn: Callable[[SandboxPool], Awaitable[T]], pool: SandboxPool) -> T:
    return await fn(pool)
