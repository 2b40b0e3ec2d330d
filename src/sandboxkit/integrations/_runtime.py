"""How adapters reach a pool from whatever thread or event loop the trainer calls them on.

An async :class:`~sandboxkit.pool.SandboxPool` belongs to the loop it first ran on, but
trainers call adapters from many places: TRL awaits rewards on its own daemon loop, verl
awaits ``compute_score`` on a reward worker's loop, rLLM calls environments from a
64-thread pool. So every adapter holds a :class:`PoolHandle`: one lazily created
:class:`~sandboxkit.sync.SyncSandboxPool` (a private loop thread) shared by all callers.
Async callers await a future bridged onto their own loop; sync callers block. Either way a
call has a wall-clock bound, and a call past it is cancelled on the pool's loop, so an
adapter never blocks a trainer past its deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from pydantic import SecretStr

from sandboxkit.base import Backend
from sandboxkit.configs import BaseBackendConfig
from sandboxkit.errors import DeadlineExceeded, InvalidRequest, PoolClosed, SandboxError
from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session
from sandboxkit.sync import SyncSandboxPool

__all__ = [
    "BackendLike",
    "PoolHandle",
    "close_shared_handles",
    "env_settings",
    "open_session",
    "run_blocking",
    "shared_handle",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What an adapter accepts as its sandbox source: a backend name, a config (or a mapping with a
#: ``kind``, as YAML gives it), a Backend instance, or a ready SyncSandboxPool.
BackendLike = str | BaseBackendConfig | Mapping[str, Any] | Backend | SyncSandboxPool
_Spec = str | BaseBackendConfig | Backend | SyncSandboxPool

#: Extra seconds the caller waits past a call's own deadline before giving up on the pool's loop.
GRACE_S = 5.0


def _resolve(backend: BackendLike, pool_options: Mapping[str, Any]) -> tuple[_Spec, dict[str, Any]]:
    """The backend as a validated config where it has one, and the pool options without ``backend_options``.

    Validating here means a typo in a YAML or env option fails when the adapter is built,
    naming the valid keys, not on the first call of a training run.
    """
    options = dict(pool_options)
    if isinstance(backend, SandboxPool):
        raise InvalidRequest(
            "adapters need a pool usable from any thread: pass a backend name, a Backend instance or a "
            "SyncSandboxPool, not an async SandboxPool (it is bound to the event loop it first ran on)"
        )
    if isinstance(backend, (Backend, SyncSandboxPool)):
        return backend, options
    from sandboxkit.registry import backend_config

    backend_options = options.pop("backend_options", None) or {}
    config = backend_config(backend, backend_options)
    if config is not None:
        return config, options
    if not isinstance(backend, str):  # a mapping or config of a plugin without a config model
        data = dict(backend.options() if isinstance(backend, BaseBackendConfig) else backend)
        backend = str(data.pop("kind"))
        backend_options = {**data, **backend_options}
    if backend_options:
        options["backend_options"] = dict(backend_options)
    return backend, options


class PoolHandle:
    """One lazily created, thread-safe :class:`SyncSandboxPool` for an adapter object.

    Args:
        backend: a backend name or config (or a ``{"kind": ...}`` mapping), a :class:`Backend`
            instance (the pool will not close it), or a ready :class:`SyncSandboxPool` that the
            caller owns and closes.
        pool_options: keyword arguments for :class:`~sandboxkit.pool.SandboxPool`; a
            ``backend_options`` entry is validated against the backend's config here.

    Raises:
        InvalidRequest: ``backend`` is an async ``SandboxPool`` (it is bound to one event loop),
            or a backend option is unknown or invalid.
        BackendNotFound: no backend has that name.
    """

    def __init__(self, backend: BackendLike = "subprocess", **pool_options: Any) -> None:
        spec, options = _resolve(backend, pool_options)
        self._spec: _Spec = spec
        self._options = options
        self._pool: SyncSandboxPool | None = spec if isinstance(spec, SyncSandboxPool) else None
        self._owned = not isinstance(spec, SyncSandboxPool)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # Calls in flight, so close() can end them: a stopped loop would leave their callers waiting.
        self._inflight: weakref.WeakSet[concurrent.futures.Future[Any]] = weakref.WeakSet()

    @property
    def backend_name(self) -> str:
        """Name of the backend, for logs and metrics."""
        if isinstance(self._spec, str):
            return self._spec
        if isinstance(self._spec, BaseBackendConfig):
            return self._spec.kind
        if isinstance(self._spec, SyncSandboxPool):
            return self._spec.backend.name
        return self._spec.name

    @property
    def created(self) -> bool:
        """Whether the pool exists yet (it is created on first use)."""
        return self._pool is not None

    @property
    def pool(self) -> SyncSandboxPool:
        """The pool, created on first access.

        Raises:
            BackendNotFound, BackendUnavailable, InvalidRequest: the pool could not be built.
        """
        with self._lock:
            if self._pool is not None and self._owned and self._pid != os.getpid():
                # A forked child (Ray, multiprocessing) inherits no loop thread: build a fresh pool.
                self._pool = None
                self._pid = os.getpid()
            if self._pool is None or (self._owned and self._pool.closed):
                assert not isinstance(self._spec, SyncSandboxPool)
                self._pool = SyncSandboxPool(self._spec, **self._options)
            return self._pool

    def submit(self, fn: Callable[[SandboxPool], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Run ``fn(async_pool)`` on the pool's loop thread.

        Raises:
            SandboxError: the pool could not be built or is closed.
        """
        future = self.pool.submit(fn)
        with self._lock:
            self._inflight.add(future)
        return future

    async def acall(self, fn: Callable[[SandboxPool], Awaitable[T]], timeout: float | None) -> T:
        """Await ``fn(async_pool)`` from any event loop, for at most ``timeout`` seconds.

        Raises:
            DeadlineExceeded: the call did not finish in time; it is cancelled on the pool's loop.
            SandboxError: whatever the call raised.
        """
        future = self.submit(fn)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except (TimeoutError, asyncio.TimeoutError) as exc:
            future.cancel()
            raise DeadlineExceeded(
                f"sandbox call did not finish within {timeout:g}s; raise the adapter's deadline_s",
                backend=self.backend_name,
            ) from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and (task is None or not task.cancelling()):
                raise self._closed_under_call() from None  # the pool went away, not our caller
            future.cancel()
            raise

    def call(self, fn: Callable[[SandboxPool], Awaitable[T]], timeout: float | None) -> T:
        """Blocking twin of :meth:`acall`."""
        future = self.submit(fn)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise DeadlineExceeded(
                f"sandbox call did not finish within {timeout:g}s; raise the adapter's deadline_s",
                backend=self.backend_name,
            ) from exc
        except concurrent.futures.CancelledError:
            raise self._closed_under_call() from None
        except BaseException:
            future.cancel()
            raise

    def _closed_under_call(self) -> PoolClosed:
        return PoolClosed(
            "the pool was closed while the call was in flight; build the adapter again to get a new pool",
            backend=self.backend_name,
        )

    def close(self) -> None:
        """Close the pool if this handle created it. Idempotent; never raises."""
        if not self._owned:  # the caller's pool: the caller closes it
            return
        with self._lock:
            pool, self._pool = self._pool, None
            inflight, self._inflight = list(self._inflight), weakref.WeakSet()
        for future in inflight:  # their callers get PoolClosed now, not a wait until their deadline
            future.cancel()
        if pool is not None:
            try:
                pool.close()
            except Exception:
                log.warning("closing the %s pool failed", self.backend_name, exc_info=True)

    def __getstate__(self) -> dict[str, Any]:
        # A live pool (thread, loop, sandboxes) cannot cross a process boundary: ship the recipe.
        if isinstance(self._spec, SyncSandboxPool):
            raise TypeError(
                "an adapter built on a SyncSandboxPool cannot be pickled; pass a backend name instead so each "
                "process builds its own pool"
            )
        return {"spec": self._spec, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"], **state["options"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"<PoolHandle backend={self.backend_name!r} created={self.created}>"


_shared: dict[str, PoolHandle] = {}
_shared_lock = threading.Lock()


def shared_handle(backend: BackendLike, **pool_options: Any) -> PoolHandle:
    """A process-wide handle per (backend, options), for adapters built many times per run.

    rLLM builds one environment per trajectory and verl loads ``compute_score`` once per
    worker; giving each its own pool would mean one loop thread and one set of warm
    sandboxes per trajectory. Non-string backends get their own handle keyed on identity.
    """
    spec, options = _resolve(backend, pool_options)
    if isinstance(spec, str):
        key = spec
    elif isinstance(spec, BaseBackendConfig):
        key = spec.kind + json.dumps(spec.model_dump(), sort_keys=True, default=_fingerprint)
    else:
        key = f"{type(spec).__name__}@{id(spec)}"
    key += "|" + json.dumps(options, sort_keys=True, default=repr)
    with _shared_lock:
        handle = _shared.get(key)
        if handle is None:
            handle = PoolHandle(spec, **options)
            _shared[key] = handle
        return handle


def _fingerprint(value: Any) -> str:
    # Two configs that differ only in their API key must not share a pool; the key itself stays out of the dict.
    if isinstance(value, SecretStr):
        return "secret:" + hashlib.sha256(value.get_secret_value().encode()).hexdigest()
    return repr(value)


def close_shared_handles() -> None:
    """Close every shared pool (tests, end of an evaluation run). Never raises."""
    with _shared_lock:
        handles = list(_shared.values())
        _shared.clear()
    for handle in handles:
        handle.close()


def _backend_value(raw: str) -> str | dict[str, Any]:
    """A backend name, or a JSON config such as ``{"kind": "docker", "image": "python:3.12"}``."""
    if raw.lstrip().startswith("{"):
        data = json.loads(raw)
        if isinstance(data, dict):
            return data
    return raw


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Adapter settings from ``SANDBOXKIT_*`` environment variables (only those that are set).

    Trainers launched from YAML (verl on Ray) reach their workers most easily through the
    environment. Recognised: ``SANDBOXKIT_BACKEND`` (a name, or a JSON config with a ``kind``),
    ``SANDBOXKIT_BACKEND_OPTIONS`` (JSON object, checked against the backend's config),
    ``SANDBOXKIT_MAX_CONCURRENCY``, ``SANDBOXKIT_TIMEOUT`` (seconds per run),
    ``SANDBOXKIT_MEMORY_MB``, ``SANDBOXKIT_DEADLINE_S``, ``SANDBOXKIT_LANGUAGE``, ``SANDBOXKIT_LIMITER``
    (``local`` or ``ray``: the cluster-wide caps of :mod:`sandboxkit.distributed`).

    Raises:
        InvalidRequest: a variable is set to a value of the wrong type.
    """
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    casts: dict[str, tuple[str, Callable[[str], Any]]] = {
        "SANDBOXKIT_BACKEND": ("backend", _backend_value),
        "SANDBOXKIT_BACKEND_OPTIONS": ("backend_options", json.loads),
        "SANDBOXKIT_MAX_CONCURRENCY": ("max_concurrency", int),
        "SANDBOXKIT_TIMEOUT": ("timeout", float),
        "SANDBOXKIT_MEMORY_MB": ("memory_limit_mb", int),
        "SANDBOXKIT_DEADLINE_S": ("deadline_s", float),
        "SANDBOXKIT_LANGUAGE": ("language", str),
        "SANDBOXKIT_LIMITER": ("limiter", str),
    }
    for var, (key, cast) in casts.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        try:
            out[key] = cast(raw)
        except ValueError as exc:
            raise InvalidRequest(f"environment variable {var}={raw!r} is not valid: {exc}") from exc
    if "backend_options" in out and not isinstance(out["backend_options"], dict):
        raise InvalidRequest('SANDBOXKIT_BACKEND_OPTIONS must be a JSON object, e.g. \'{"url": "http://..."}\'')
    return out


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run an adapter's async method to completion from synchronous code.

    Each adapter writes its logic once, as a coroutine; its blocking twin calls this. The
    coroutine runs on a short-lived loop in this thread, or, when this thread already runs a
    loop (a notebook, an async trainer calling the sync form), in a helper thread, since a
    running loop cannot be re-entered.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandboxkit-blocking") as pool:
        return pool.submit(asyncio.run, coro).result()


def limits_with(base: Limits | None, *, timeout_s: float | None = None, memory_limit_mb: int | None = None) -> Limits:
    """``base`` (or the defaults) with a timeout and a memory limit applied when given.

    Raises:
        InvalidRequest: a value is out of range.
    """
    try:
        return (base or Limits()).merged(timeout_s=timeout_s, memory_mb=memory_limit_mb)
    except ValueError as exc:
        raise InvalidRequest(f"invalid limits: {exc}") from exc


def is_infra_error(exc: BaseException) -> bool:
    """Whether ``exc`` means "the sandbox could not give an answer" rather than a bug in the caller."""
    return isinstance(exc, SandboxError)


async def open_session(pool: SandboxPool, limits: Limits) -> Session:
    """A session with its sandbox opened now (so a failure shows here, not on the first call).

    Raises:
        SandboxError: the sandbox could not be opened (the session is closed again).
    """
    session = pool.session(limits=limits)
    try:
        await session.open()
    except BaseException:
        await session.close()
        raise
    return session
