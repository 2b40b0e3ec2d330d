"""``Session``: one sandbox held across calls, for multi-turn tools and agent environments.

A session is a friend of its :class:`~sandboxkit.pool.SandboxPool`: it takes its sandbox slot,
call slots and metrics from the pool, so sessions and pooled calls share one set of caps.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from sandboxkit._request import make_request, positive_timeout
from sandboxkit._slots import CallSlot, Entry
from sandboxkit.base import Sandbox
from sandboxkit.errors import DeadlineExceeded, PoolClosed, SandboxError, Transient
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult

if TYPE_CHECKING:
    from sandboxkit.pool import SandboxPool

__all__ = ["Session"]

T = TypeVar("T")


class Session:
    """One sandbox held across calls, for multi-turn tools and agent environments.

    If the sandbox dies, the call that saw it raises :class:`SandboxCrashed` and the next
    call opens a fresh sandbox (``restarts`` counts how often); state is lost then, which is
    why the error is raised rather than hidden.
    """

    def __init__(self, pool: SandboxPool, limits: Limits) -> None:
        self.pool = pool
        self.limits = limits
        self._entry: Entry | None = None
        self.restarts = 0
        self.closed = False
        self._lock = anyio.Lock()

    @property
    def sandbox_id(self) -> str | None:
        """Id of the current sandbox, if one is open."""
        return self._entry.sandbox.id if self._entry else None

    async def __aenter__(self) -> Session:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the session's sandbox now (otherwise the first call opens it).

        Raises:
            BackendUnavailable, RateLimited, Transient: opening failed after the pool's retries.
        """
        await self._ensure()

    async def _ensure(self) -> Entry:
        if self.closed:
            raise PoolClosed(
                "this session is closed; open a new one with pool.session()", backend=self.pool.backend.name
            )
        if self._entry is not None:
            return self._entry
        if not self.pool._started:
            await self.pool.start()
        attempt = 0
        while True:
            try:
                # A warm idle sandbox (reset when it was given back) is as clean as a new one and far cheaper.
                entry = await self.pool._take_idle(self.limits)
                if entry is not None:
                    self._entry = entry
                    return entry
                entry = await self.pool._open_entry(self.limits)
                if entry is None:
                    if self.pool._idle:
                        # Warm idle sandboxes hold every slot and nothing would ever free one for
                        # us: close the least recently used to make room.
                        await self.pool._close_entry(self.pool._idle[0])
                        continue
                    await self.pool._wait_for_change()
                    continue
                self._entry = entry
                return entry
            except Transient as exc:
                if attempt >= self.pool.retries:
                    raise
                await anyio.sleep(self.pool._backoff(attempt, exc))
                attempt += 1

    async def _call(self, fn: Callable[[Sandbox], Awaitable[T]], deadline_s: float | None) -> T:
        async with self._lock:  # a sandbox serves one call at a time
            entry = await self._ensure()
            metrics = self.pool.metrics_data
            record = metrics.call_started()
            started = time.perf_counter()
            slot = CallSlot(self.pool._limiter)
            try:
                await slot.acquire()
                record.queue_wait = time.perf_counter() - started
                with anyio.move_on_after(deadline_s) as scope:
                    result = await fn(entry.sandbox)
                if scope.cancelled_caught:
                    raise DeadlineExceeded(
                        f"session call did not finish within {deadline_s:g}s; the sandbox was discarded",
                        backend=self.pool.backend.name,
                        sandbox_id=entry.sandbox.id,
                    )
            except BaseException as exc:
                # An infrastructure error, a deadline or a cancellation leaves the sandbox in an unknown state.
                await self._discard()
                if isinstance(exc, SandboxError):
                    metrics.call_failed(record, exc, time.perf_counter() - started)
                raise
            finally:
                slot.release()
            record.run_time = time.perf_counter() - started - record.queue_wait
            metrics.call_finished(record, result, time.perf_counter() - started)
            return result

    async def _discard(self) -> None:
        if self._entry is not None:
            entry, self._entry = self._entry, None
            self.restarts += 1
            await self.pool._close_entry(entry)

    async def run(
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
        """Like :meth:`SandboxPool.run`, in this session's sandbox (files persist)."""
        request = make_request(
            code,
            language=language,
            stdin=stdin,
            files=files,
            fetch_files=fetch_files,
            limits=limits,
            timeout=timeout,
            default_limits=self.limits,
        )
        self.pool._check_language(request.language)
        return await self._call(lambda s: s.run(request), deadline_s)

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        deadline_s: float | None = None,
    ) -> ExecResult:
        """Run a command in this session's sandbox (cwd relative to the workspace)."""
        if timeout is not None:
            positive_timeout(timeout)
        return await self._call(lambda s: s.exec(command, cwd=cwd, env=env, stdin=stdin, timeout=timeout), deadline_s)

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Write files into this session's workspace."""
        await self._call(lambda s: s.write_files(files), None)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files from this session's workspace (missing ones are absent)."""
        return await self._call(lambda s: s.read_files(paths), None)

    async def close(self) -> None:
        """Give the sandbox back (reset and kept warm when possible). Idempotent, shielded."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            if self._entry is not None:
                entry, self._entry = self._entry, None
                await self.pool._give_back(entry, dirty=True)
