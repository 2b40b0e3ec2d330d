"""``Session``: one sandbox held across calls, for multi-turn tools and agent environments.

A session leases its sandbox from the pool's :class:`~sandboxkit._lease.LeaseCore` and runs
every call through the same guarded path as pooled calls (call slot, deadline, metrics), so
sessions and pooled calls share one set of caps, one default deadline and one set of rules,
and cannot deadlock each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio

from sandboxkit._lease import LeaseCore, keeps_sandbox
from sandboxkit._request import RunsPrograms, positive_timeout
from sandboxkit._slots import CallSlot, Entry
from sandboxkit.base import Capabilities, OutputCallback, Sandbox
from sandboxkit.errors import InvalidRequest, PoolClosed
from sandboxkit.models import ExecResult, Limits
from sandboxkit.streaming import check_callbacks, exec_streaming

if TYPE_CHECKING:
    from sandboxkit.kernel import CellResult  # imported by the backends that run kernels, not by `import sandboxkit`

__all__ = ["Session"]

T = TypeVar("T")


class Session(RunsPrograms):
    """One sandbox held across calls, for multi-turn tools and agent environments.

    Create it with :meth:`SandboxPool.session`. The sandbox counts against the pool's
    ``max_sandboxes`` until the session closes; between calls it holds no call slot.

    If a call fails because of the infrastructure (the sandbox crashed, a transient fault,
    the deadline passed, the call was cancelled), the sandbox's state is unknown: it is
    discarded, the error is raised, and the next call opens a fresh sandbox (``restarts``
    counts how often). State is lost then, which is why the error is raised rather than
    hidden. A caller's own mistake (``InvalidRequest``: a bad path, an unknown language)
    keeps the sandbox and its state.
    """

    def __init__(self, core: LeaseCore, limits: Limits) -> None:
        self._core = core
        self.limits = limits
        self._entry: Entry | None = None
        self.restarts = 0
        self.closed = False
        self._lock = anyio.Lock()
        #: Id of the sandbox whose kernel ran this session's last cell (a new sandbox means new state).
        self._kernel_home: str | None = None

    @property
    def sandbox_id(self) -> str | None:
        """Id of the current sandbox, if one is open."""
        return self._entry.sandbox.id if self._entry else None

    @property
    def backend_name(self) -> str:
        """Name of the backend serving this session, for messages and logs."""
        return self._core.backend.name

    @property
    def capabilities(self) -> Capabilities:
        """What this session's backend can do (absolute paths, streaming...), to check before relying on it."""
        return self._core.backend.capabilities

    async def __aenter__(self) -> Session:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the session's sandbox now (otherwise the first call opens it).

        Raises:
            PoolClosed: the session or its pool is closed.
            BackendUnavailable, RateLimited, Transient: opening failed after the pool's retries.
        """
        async with self._lock:
            self._check_open()
            if self._entry is None:
                await self._core.ensure_started()
                self._entry = await self._core.within_deadline(
                    lambda: self._core.lease_retrying(self.limits), None, "opening the session's sandbox"
                )

    def _check_open(self) -> None:
        if self.closed:
            raise PoolClosed(
                "this session is closed; open a new one with pool.session()", backend=self._core.backend.name
            )

    async def _acquire(self, slot: CallSlot) -> Entry:
        self._check_open()
        if self._entry is None:
            # A warm idle sandbox (reset when it was given back) is as clean as a new one and far cheaper.
            self._entry = await self._core.lease(self.limits, slot=slot)
        return self._entry

    async def _release(self, entry: Entry, error: BaseException | None) -> None:
        if error is None or keeps_sandbox(error):
            return  # the sandbox stays with the session, state intact
        if self._entry is entry:
            self._entry = None
            self.restarts += 1
        await self._core.discard(entry)

    async def _call(self, fn: Callable[[Sandbox], Awaitable[T]], deadline_s: float | None) -> T:
        async with self._lock:  # a sandbox serves one call at a time
            return await self._core.call(
                fn,
                deadline_s=deadline_s,
                acquire=self._acquire,
                release=self._release,
                retry_started=False,
                what="session call",
            )

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        deadline_s: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecResult:
        """Run a command in this session's sandbox (cwd relative to the workspace).

        ``on_stdout`` / ``on_stderr``: as in :meth:`run` (see :mod:`sandboxkit.streaming`).
        """
        if timeout is not None:
            positive_timeout(timeout)
        if on_stdout is not None or on_stderr is not None:
            check_callbacks(on_stdout, on_stderr, self._core.backend.name)
        streams = self._core.backend.capabilities.streaming
        return await self._call(
            lambda s: exec_streaming(
                s,
                streams,
                command,
                cwd=cwd,
                env=env,
                stdin=stdin,
                timeout=timeout,
                on_stdout=on_stdout,
                on_stderr=on_stderr,
            ),
            deadline_s,
        )

    async def python(
        self,
        code: str,
        *,
        timeout: float | None = None,
        fresh: bool = False,
        deadline_s: float | None = None,
    ) -> CellResult:
        """Run a cell in this session's persistent Python interpreter (variables survive between calls).

        The kernel runs inside the session's sandbox with the isolation and limits of its
        commands, and sees its files. A cell's exception, timeout or crash is a result, not an
        error; a timeout or crash restarts the kernel, and ``state_lost`` says the earlier cells'
        variables are gone (also when the session had to replace its sandbox). See
        ``docs/kernels.md``.

        Args:
            code: Python source; the last expression's ``repr`` is the result's ``value``.
            timeout: wall-clock limit of this cell (default: the session's ``limits.timeout_s``).
            fresh: run in a new interpreter, without the state of earlier cells.
            deadline_s: the call's deadline (queueing included), as for :meth:`run`.

        Returns:
            How the cell ended, with its stdout, stderr, value or traceback.

        Raises:
            InvalidRequest: the backend has no kernels (``capabilities.kernels``), ``code`` is
                not a string or ``timeout`` is not positive.
            SandboxCrashed, Transient, DeadlineExceeded: as for :meth:`run` (the sandbox, and the
                kernel's state with it, is replaced on the next call).
        """
        backend = self._core.backend
        if not backend.capabilities.kernels:
            raise InvalidRequest(
                f"the {backend.name!r} backend has no Python kernels (capabilities.kernels is False); "
                "use the subprocess or docker backend",
                backend=backend.name,
            )
        if not isinstance(code, str):
            raise InvalidRequest(f"code must be a str, got {type(code).__name__}", backend=backend.name)
        if timeout is not None:
            positive_timeout(timeout)

        async def cell(sandbox: Sandbox) -> CellResult:
            kernel = await sandbox.open_kernel()
            result = await kernel.run(code, timeout=timeout, fresh=fresh)
            moved = self._kernel_home is not None and self._kernel_home != sandbox.id
            self._kernel_home = sandbox.id
            if moved and not fresh:  # the old sandbox (and its kernel) was discarded after a failure
                result = result.model_copy(update={"state_lost": True, "restarted": True})
            return result

        return await self._call(cell, deadline_s)

    async def write_files(self, files: Mapping[str, bytes | str], *, deadline_s: float | None = None) -> None:
        """Write files into this session's workspace."""
        await self._call(lambda s: s.write_files(files), deadline_s)

    async def read_files(self, paths: Sequence[str], *, deadline_s: float | None = None) -> dict[str, bytes]:
        """Read files from this session's workspace (missing ones are absent)."""
        return await self._call(lambda s: s.read_files(paths), deadline_s)

    async def close(self) -> None:
        """Give the sandbox back (reset and kept warm when possible). Idempotent, shielded."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            if self._entry is not None:
                entry, self._entry = self._entry, None
                await self._core.give_back(entry, dirty=True)
