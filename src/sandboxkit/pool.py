"""``SandboxPool``: the one place where caps, rate limits, reuse, retries and teardown live.

Every backend sits behind it, and every adapter uses it, so a training run gets the same
discipline whichever sandbox service it talks to:

* a hard cap on calls in flight and on open sandboxes, and a token bucket on creation;
* warm sandboxes handed out only after a liveness check, reset between unrelated runs,
  recycled after ``max_uses`` runs or after any infrastructure error;
* retries with exponential backoff and full jitter on :class:`~sandboxkit.errors.Transient`
  errors only (never on a program's own failure, which is a result, not an exception);
* a deadline on the whole call (queue wait and retries included);
* teardown on close, on cancellation (shielded), on SIGINT/SIGTERM, and at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from sandboxkit._lease import CLOSE_TIMEOUT_S, LeaseCore
from sandboxkit._request import RunsPrograms, renamed
from sandboxkit._signals import install_sigterm_to_exit
from sandboxkit._watchdog import ttl_for
from sandboxkit._workers._plan import plan_workers
from sandboxkit.base import Backend, Sandbox
from sandboxkit.checkpoint import Checkpoint, check_forkable
from sandboxkit.errors import InvalidRequest, PoolClosed, SandboxCrashed, SandboxkitError
from sandboxkit.limiter import Limiter, LocalLimiter
from sandboxkit.metrics import PoolMetrics
from sandboxkit.models import Limits, RunRequest, RunResult
from sandboxkit.session import Session

if TYPE_CHECKING:
    from sandboxkit.configs import BaseBackendConfig

__all__ = ["SandboxPool"]

log = logging.getLogger(__name__)
T = TypeVar("T")


_live_pools: weakref.WeakSet[SandboxPool] = weakref.WeakSet()


@atexit.register
def _emergency_cleanup_at_exit() -> None:
    # Last line of defence when a script exits without closing its pool (or an unhandled
    # exception unwinds past it): ask each backend to remove what it created, synchronously.
    for pool in list(_live_pools):
        if not pool.closed:
            try:
                pool.backend.emergency_cleanup()
            except Exception:  # at exit, never raise
                log.debug("emergency cleanup of %s failed", pool.backend.name, exc_info=True)


class SandboxPool(RunsPrograms):
    """A bounded, self-healing pool of sandboxes from one backend.

    Use it as ``async with SandboxPool("subprocess") as pool: await pool.run(code)``.
    For synchronous code, see :class:`sandboxkit.SyncSandboxPool`.

    Args:
        backend: a registered backend name, a :class:`~sandboxkit.base.Backend` instance, or a
            backend config such as ``DockerConfig(image=...)`` (:mod:`sandboxkit.configs`).
        max_concurrency: calls (runs, execs) in flight at once.
        max_sandboxes: sandboxes open and running at once (default: ``max_concurrency``; sessions hold
            one each, suspended ones count against ``max_suspended`` instead).
        creation_rate: sandbox creations per second (token bucket); ``None`` = unlimited.
        creation_burst: creations allowed at once before the rate applies.
        warm: sandboxes opened at start so the first calls do not pay creation.
        max_uses: a sandbox is closed after this many pooled runs (fresh state, bounded leaks).
        retries: retries of a call after a ``Transient`` error (``RateLimited`` included).
        backoff_base_s: first backoff in seconds (default 0.2); doubles per retry, with full jitter.
        backoff_max_s: cap on one backoff, in seconds (default 10).
        deadline_s: default deadline of one call, queue wait and retries included (``None`` = none).
        health_check_after_s: an idle sandbox is checked with ``alive()`` before lease once it has
            been idle this long (0 = always).
        limits: default limits of runs and of the sandboxes the pool opens.
        backend_options: options passed to the backend when ``backend`` is a name.
        limiter: a :class:`~sandboxkit.limiter.Limiter`, ``"local"`` (default) or ``"ray"``.
        handle_signals: turn SIGTERM into a clean shutdown (main thread only; SIGINT already is).
        processes: host worker processes that serve the pool's runs and execs, an integer or
            ``"auto"``; ``None`` (default) reads ``$SANDBOXKIT_POOL_PROCESSES``, else 1 (this process
            only). Caps, deadlines, metrics and errors are the pool's either way; see
            docs/multiprocess.md for when it pays and what each worker costs in memory.
        backoff_base, backoff_max: the deprecated old names of ``backoff_base_s`` / ``backoff_max_s``.
        suspend_idle_s: a session no call used for this long is suspended (no CPU while the model
            thinks) and resumed by its next call (``None``: never; see docs/fleet.md).
        max_suspended: suspended sessions held at once (default: ``max_sandboxes``). They count
            against this cap instead of ``max_sandboxes``, so they never block running calls; a
            suspend past it leaves the session running (``Session.suspend`` returns False).

    Raises:
        BackendNotFound: the backend name is unknown.
        BackendUnavailable: the backend's SDK is missing.
        InvalidRequest: a parameter is out of range.
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
        backoff_base_s: float | None = None,
        backoff_max_s: float | None = None,
        deadline_s: float | None = None,
        health_check_after_s: float = 0.0,
        limits: Limits | None = None,
        backend_options: Mapping[str, Any] | None = None,
        limiter: Limiter | str = "local",
        handle_signals: bool = True,
        processes: int | str | None = None,
        backoff_base: float | None = None,
        backoff_max: float | None = None,
        suspend_idle_s: float | None = None,
        max_suspended: int | None = None,
    ) -> None:
        from sandboxkit.registry import backend as make_backend

        if not isinstance(backend, Backend):  # a name or a config (sandboxkit.configs)
            self.backend: Backend = make_backend(backend, **dict(backend_options or {}))
            self._owns_backend = True
        else:
            self.backend = backend
            self._owns_backend = False
        for name, value, low in (
            ("max_concurrency", max_concurrency, 1),
            ("max_uses", max_uses, 1),
            ("retries", retries, 0),
            ("warm", warm, 0),
        ):
            if not isinstance(value, int) or value < low:
                raise InvalidRequest(f"{name} must be an integer >= {low}, got {value!r}", backend=self.backend.name)
        if deadline_s is not None and deadline_s <= 0:
            raise InvalidRequest(f"deadline_s must be positive or None, got {deadline_s!r}", backend=self.backend.name)
        self.max_concurrency = max_concurrency
        self.max_sandboxes = max_sandboxes if max_sandboxes is not None else max_concurrency
        self.limits = limits or Limits()
        self.warm = min(warm, self.max_sandboxes)
        self.max_uses = max_uses
        self.retries = retries
        base_s = renamed(backoff_base_s, backoff_base, "backoff_base", where="SandboxPool")
        max_s = renamed(backoff_max_s, backoff_max, "backoff_max", where="SandboxPool")
        self.backoff_base_s = 0.2 if base_s is None else base_s
        self.backoff_max_s = 10.0 if max_s is None else max_s
        self.deadline_s = deadline_s
        if suspend_idle_s is not None and suspend_idle_s <= 0:
            raise InvalidRequest(
                f"suspend_idle_s must be positive or None, got {suspend_idle_s!r}", backend=self.backend.name
            )
        self.suspend_idle_s = suspend_idle_s
        if max_suspended is not None and (not isinstance(max_suspended, int) or max_suspended < 0):
            raise InvalidRequest(
                f"max_suspended must be an integer >= 0 or None, got {max_suspended!r}", backend=self.backend.name
            )
        self.max_suspended = self.max_sandboxes if max_suspended is None else max_suspended
        ttl_s = ttl_for(deadline_s, self.limits)  # the dead-man switch: a backend shared by pools takes the longest
        self.backend.owner_ttl_s = max(ttl_s, self.backend.owner_ttl_s or 0.0)
        self.health_check_after_s = health_check_after_s
        self.handle_signals = handle_signals
        self._limiter = self._make_limiter(limiter, creation_rate, creation_burst)
        self._workers = plan_workers(self, processes, backend, backend_options)
        if self._workers is not None:
            self._limiter = self._workers.limiter
        self.closed = False
        self.metrics_data = PoolMetrics()
        self._core = LeaseCore(
            self.backend,
            self._limiter,
            self.metrics_data,
            self,
            on_first_use=self.start,
        )
        _live_pools.add(self)

    # ----------------------------------------------------------------- set-up / teardown

    def _make_limiter(self, limiter: Limiter | str, rate: float | None, burst: float | None) -> Limiter:
        if isinstance(limiter, Limiter):
            return limiter
        if limiter == "local":
            return LocalLimiter(self.max_concurrency, self.max_sandboxes, rate, burst)
        if limiter == "ray":
            from sandboxkit.distributed import ray_limiter

            ray: Limiter = ray_limiter(self.max_concurrency, self.max_sandboxes, rate, burst, backend=self.backend.name)
            return ray
        raise InvalidRequest(
            f"limiter must be 'local', 'ray' or a sandboxkit.limiter.Limiter (subclass it for the no-op "
            f"defaults of penalize_creation and attach), got {limiter!r}",
            backend=self.backend.name,
        )

    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the ``warm`` sandboxes. Called by ``async with``; optional otherwise.

        Raises:
            BackendUnavailable: the backend cannot create sandboxes here.
        """
        self._core.check_open()
        if self._core.started:
            return
        self._core.started = True
        if self.handle_signals:
            install_sigterm_to_exit()
        if self._workers is not None:
            await self._workers.start()  # the workers open the warm sandboxes
        elif self.warm:
            async with anyio.create_task_group() as tg:
                for _ in range(self.warm):
                    tg.start_soon(self._core.prewarm)

    async def aclose(self) -> None:
        """Close every sandbox the pool opened, then the backend if the pool created it.

        Idempotent, and it finishes even if the calling task is being cancelled.
        """
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            await self._core.close_all()
            if self._workers is not None:
                await self._workers.aclose()
            try:
                await self._limiter.aclose()
            finally:
                if self._owns_backend:
                    with anyio.move_on_after(CLOSE_TIMEOUT_S):
                        await self.backend.aclose()
        _live_pools.discard(self)

    # ----------------------------------------------------------------- calls

    async def _call(self, fn: Callable[[Sandbox], Awaitable[T]], deadline_s: float | None) -> T:
        return await self._core.call(fn, deadline_s=deadline_s)

    async def run_many(
        self,
        requests: Iterable[RunRequest | Mapping[str, Any]],
        *,
        deadline_s: float | None = None,
    ) -> list[RunResult | SandboxkitError]:
        """Run a batch concurrently (within the pool's caps); results come back in input order.

        Every input yields exactly one output: a :class:`RunResult`, or the
        :class:`SandboxkitError` that prevented it (an invalid request is an ``InvalidRequest``
        in its slot, the other requests still run).
        """
        items = list(requests)
        results: list[RunResult | SandboxkitError | None] = [None] * len(items)

        async def one(i: int, item: RunRequest | Mapping[str, Any]) -> None:
            try:
                results[i] = await self.run(item, deadline_s=deadline_s)
            except SandboxkitError as exc:
                results[i] = exc
            except Exception as exc:  # a backend bug must not lose the rest of the batch
                log.exception("unexpected error from backend %s", self.backend.name)
                results[i] = SandboxCrashed(
                    f"backend raised {type(exc).__name__}: {exc}; this is a bug in the backend, please report it",
                    backend=self.backend.name,
                )

        async with anyio.create_task_group() as tg:
            for i, item in enumerate(items):
                tg.start_soon(one, i, item)
        return [r if r is not None else PoolClosed("no result", backend=self.backend.name) for r in results]

    def session(self, *, limits: Limits | None = None, from_checkpoint: Checkpoint | None = None) -> Session:
        """A stateful sandbox held for a multi-turn exchange (files and cwd persist).

        Use ``async with pool.session() as s:`` or ``s = pool.session(); await s.open(); ...; await s.close()``.
        The sandbox counts against ``max_sandboxes`` until the session closes.

        Args:
            limits: limits of its sandbox (default: the pool's, or the checkpoint's).
            from_checkpoint: start from this checkpoint's files and ``exec`` defaults (one fork).

        Raises:
            InvalidRequest: the checkpoint is released or belongs to another pool.
        """
        if from_checkpoint is None:
            return Session(self._core, limits or self.limits, suspend_idle_s=self.suspend_idle_s)
        self._core.metrics.forked(1)
        return Session(
            self._core, limits or from_checkpoint.limits, origin=from_checkpoint, suspend_idle_s=self.suspend_idle_s
        )

    async def fork(
        self,
        source: Checkpoint | Session,
        n: int,
        *,
        limits: Limits | None = None,
        deadline_s: float | None = None,
    ) -> list[Session]:
        """Open ``n`` sessions that each start from ``source``'s state (copy-on-write where the backend can).

        Writes in one fork reach neither its siblings nor ``source``; closing the session a
        checkpoint was taken from, or releasing the checkpoint, leaves the forks working. A
        session as ``source`` is checkpointed for the occasion and the checkpoint released after.
        All or nothing: if one fork fails, those already open are closed and the error is raised.
        The forks count against ``max_sandboxes``; close each (or ``async with`` it) when done.

        Args:
            source: a :class:`~sandboxkit.checkpoint.Checkpoint`, or a session to checkpoint now.
            n: how many sessions.
            limits: limits of their sandboxes (default: the checkpoint's).
            deadline_s: deadline of opening each fork (``None``: the pool's default).

        Raises:
            InvalidRequest: ``n`` is not a positive integer, the backend cannot fork, or the
                checkpoint is released or another pool's.
            SandboxError: a fork could not be opened (after the pool's retries).
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidRequest(f"n must be an integer >= 1, got {n!r}", backend=self.backend.name)
        check_forkable(self._core)
        if isinstance(source, Session):
            async with await source.checkpoint(deadline_s=deadline_s) as checkpoint:
                return await self._fork(checkpoint, n, limits, deadline_s)
        return await self._fork(source, n, limits, deadline_s)

    async def _fork(
        self, checkpoint: Checkpoint, n: int, limits: Limits | None, deadline_s: float | None
    ) -> list[Session]:
        sessions = [
            Session(self._core, limits or checkpoint.limits, origin=checkpoint, suspend_idle_s=self.suspend_idle_s)
            for _ in range(n)
        ]
        errors: list[BaseException] = []

        async def open_one(session: Session) -> None:
            try:
                await self._core.within_deadline(session.open, deadline_s, "opening a fork")
            except Exception as exc:  # collected: every fork is closed below, then the first error raised
                errors.append(exc)

        try:
            async with anyio.create_task_group() as tg:
                for session in sessions:
                    tg.start_soon(open_one, session)
            if errors:
                raise errors[0]
        except BaseException:
            with anyio.CancelScope(shield=True):
                for session in sessions:
                    await session.close()
            raise
        self._core.metrics.forked(n)
        return sessions

    # ----------------------------------------------------------------- introspection

    def metrics(self) -> dict[str, Any]:
        """Counters and latency percentiles since the pool started, as a plain dict."""
        stats = self._limiter.statistics()
        data = self.metrics_data.snapshot()
        data.update(
            backend=self.backend.name,
            calls_in_flight=stats.calls_in_flight,
            calls_waiting=stats.calls_waiting,
            max_concurrency=stats.max_calls,
            sandboxes_open=len(self._core.entries),
            checkpoints_open=len(self._core.checkpoints),
            sandboxes_idle=len(self._core.idle),
            max_sandboxes=self.max_sandboxes,
            learned_cap=self._core.capacity.cap,
            capacity_refusals=self._core.capacity.refusals,
        )
        if self._workers is not None:
            self._workers.add_metrics(data)
        return data

    @property
    def open_sandboxes(self) -> int:
        """Sandboxes this pool holds right now (idle, in use, or in sessions)."""
        return len(self._core.entries)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<SandboxPool backend={self.backend.name!r} max_concurrency={self.max_concurrency} {state}>"
