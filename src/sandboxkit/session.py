"""``Session``: one sandbox held across calls, for multi-turn tools and agent environments.

A session leases its sandbox from the pool's :class:`~sandboxkit._lease.LeaseCore` and runs
every call through the same guarded path as pooled calls (call slot, deadline, metrics), so
sessions and pooled calls share one set of caps, one default deadline and one set of rules,
and cannot deadlock each other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio

from sandboxkit._lease import LeaseCore, keeps_sandbox
from sandboxkit._request import RunsPrograms, positive_timeout, renamed
from sandboxkit._slots import CallSlot, Entry
from sandboxkit.base import Capabilities, Sandbox, Snapshot
from sandboxkit.checkpoint import Checkpoint, check_forkable
from sandboxkit.errors import InvalidRequest, PoolClosed, SandboxkitError
from sandboxkit.models import Limits

if TYPE_CHECKING:
    from sandboxkit.kernel import CellResult  # imported by the backends that run kernels, not by `import sandboxkit`

__all__ = ["Session"]

log = logging.getLogger(__name__)

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

    A session forked from a checkpoint (:meth:`SandboxPool.fork`) starts with the checkpoint's
    files, and its ``exec`` calls default to the checkpoint's ``cwd`` and add its ``env``; after
    an infrastructure error it restarts from the checkpoint while that is still held.

    Attributes:
        origin: the checkpoint this session was forked from, or ``None``.
        cwd: default working directory of :meth:`exec` (``None``: the workspace).
        env: environment variables added to every :meth:`exec` (a call's own ``env`` wins).
    """

    def __init__(
        self, core: LeaseCore, limits: Limits, origin: Checkpoint | None = None, *, suspend_idle_s: float | None = None
    ) -> None:
        if origin is not None:
            origin.check_usable(core)
        self._core = core
        self.limits = limits
        self.origin = origin
        self.cwd: str | None = origin.cwd if origin is not None else None
        self.env: dict[str, str] = dict(origin.env) if origin is not None else {}
        self._started = False  # a sandbox was opened once (a fork's state came from its checkpoint)
        self._entry: Entry | None = None
        self.restarts = 0
        self.closed = False
        self._lock = anyio.Lock()
        #: Id of the sandbox whose kernel ran this session's last cell (a new sandbox means new state).
        self._kernel_home: str | None = None
        #: The sandbox is suspended (:meth:`suspend`); the next call resumes it first.
        self.suspended = False
        #: Suspend the sandbox once no call ran for this long (the pool's ``suspend_idle_s``; None: never).
        self.suspend_idle_s = suspend_idle_s
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_tasks: set[asyncio.Task[None]] = set()
        self._last_call = time.monotonic()

    @property
    def sandbox_id(self) -> str | None:
        """Id of the current sandbox, if one is open."""
        return self._entry.sandbox.id if self._entry else None

    @property
    def backend_name(self) -> str:
        """Name of the backend serving this session: its sandbox's (a spillover pool's tier), else the pool's."""
        return self._entry.sandbox.backend_name if self._entry else self._core.backend.name

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
                    lambda: self._core.lease_retrying(self.limits, self._snapshot()),
                    None,
                    "opening the session's sandbox",
                )
                self._started = True

    def _check_open(self) -> None:
        if self.closed:
            raise PoolClosed(
                "this session is closed; open a new one with pool.session()", backend=self._core.backend.name
            )

    async def suspend(self) -> bool:
        """Stop the session's sandbox between calls, so it holds no CPU while the model thinks.

        Files and, where ``capabilities.suspend`` is ``"files+memory"``, kernel variables and the
        threads and processes kept between calls come back on :meth:`resume`, which the next
        call runs by itself. A session with no sandbox open yet has nothing to stop.

        Returns:
            True when the sandbox is suspended; False when the backend cannot suspend it
            (``capabilities.suspend == "none"``, or its freezer did not stop it) or the pool's
            ``max_suspended`` is reached: nothing changed. A suspended sandbox counts against
            ``max_suspended``, not ``max_sandboxes``; its resume waits for a running slot.

        Raises:
            PoolClosed: the session is closed.
        """
        async with self._lock:
            self._check_open()
            if self._entry is None or self.suspended:
                return self.suspended
            return await self._suspend_now(self._entry)

    async def _suspend_now(self, entry: Entry) -> bool:
        """Suspend the sandbox unless ``max_suspended`` is reached; a suspended one leaves the running cap."""
        if not self._core.may_park():
            return False
        self.suspended = await entry.sandbox.suspend()
        if self.suspended:
            self._core.park(entry)
        return self.suspended

    async def resume(self) -> None:
        """Let a suspended sandbox run again (every call does this first). Idempotent."""
        async with self._lock:
            await self._wake()

    def _arm_idle(self) -> None:
        """Start the idle clock after a call (on asyncio; elsewhere idle sessions are not suspended)."""
        self._last_call = time.monotonic()
        if self.suspend_idle_s is None or self.closed:
            return
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._idle_timer = loop.call_later(self.suspend_idle_s, self._on_idle)

    def _on_idle(self) -> None:
        self._idle_timer = None
        if self.closed or self.suspended or self._lock.locked():
            return  # a running call re-arms the clock when it ends
        task = asyncio.get_running_loop().create_task(self._suspend_if_idle())
        self._idle_tasks.add(task)
        task.add_done_callback(self._idle_tasks.discard)

    async def _suspend_if_idle(self) -> None:
        async with self._lock:
            idle = self.suspend_idle_s is not None and time.monotonic() - self._last_call >= self.suspend_idle_s
            if self.closed or self.suspended or self._entry is None or not idle:
                return
            try:
                await self._suspend_now(self._entry)
            except SandboxkitError:
                log.warning("idle suspend of session sandbox %s failed", self.sandbox_id, exc_info=True)

    async def _wake(self, slot: CallSlot | None = None, *, closing: bool = False) -> None:
        """Resume the sandbox if suspended; one that cannot come back (gone while stopped) is discarded.

        It first takes a running slot back (waiting for one, its call ``slot`` given back meanwhile),
        except when ``closing``: then it is resumed only to be closed, and stays off the running cap.

        Raises:
            SandboxCrashed, Transient...: the resume failed; the next call opens a fresh sandbox.
            PoolClosed: the pool closed while it waited for a running slot.
        """
        if self.suspended and self._entry is not None:
            if not closing:
                await self._core.unpark(self._entry, slot)
            with anyio.CancelScope(shield=True):  # never leave it frozen and marked running, or the reverse
                try:
                    await self._entry.sandbox.resume()
                except BaseException:
                    entry, self._entry, self.suspended = self._entry, None, False
                    self.restarts += 1
                    await self._core.discard(entry)
                    raise
        self.suspended = False

    async def _acquire(self, slot: CallSlot) -> Entry:
        self._check_open()
        await self._wake(slot)
        if self._entry is None:
            # A warm idle sandbox (reset when it was given back) is as clean as a new one and far cheaper.
            self._entry = await self._core.lease(self.limits, slot=slot, snapshot=self._snapshot())
            self._started = True
        return self._entry

    def _snapshot(self) -> Snapshot | None:
        """What a new sandbox of this session starts from: its checkpoint while held, else nothing.

        Raises:
            InvalidRequest: the checkpoint was released before this fork ever opened (it would
                silently start empty, and a reward computed there would be wrong).
        """
        origin = self.origin
        if origin is None:
            return None
        if origin.released:
            if not self._started:
                raise InvalidRequest(
                    f"checkpoint {origin.id} was released before this session opened; open forks "
                    "(pool.fork, or session.open()) before releasing their checkpoint",
                    backend=origin.backend_name,
                )
            return None  # a restart after an infrastructure error: state is lost, as for any session
        return origin.snapshot

    async def _release(self, entry: Entry, error: BaseException | None) -> None:
        if error is None or keeps_sandbox(error):
            return  # the sandbox stays with the session, state intact
        if self._entry is entry:
            self._entry = None
            self.restarts += 1
        await self._core.discard(entry)

    async def _call(self, fn: Callable[[Sandbox], Awaitable[T]], deadline_s: float | None) -> T:
        async with self._lock:  # a sandbox serves one call at a time
            try:
                return await self._core.call(
                    fn,
                    deadline_s=deadline_s,
                    acquire=self._acquire,
                    release=self._release,
                    retry_started=False,
                    what="session call",
                )
            finally:
                self._arm_idle()

    def _exec_defaults(
        self, cwd: str | None, env: Mapping[str, str] | None
    ) -> tuple[str | None, Mapping[str, str] | None]:
        """The session's ``cwd`` unless the call names one, and its ``env`` under the call's own."""
        return (self.cwd if cwd is None else cwd), ({**self.env, **(env or {})} if self.env else env)

    async def python(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        fresh: bool = False,
        deadline_s: float | None = None,
        timeout: float | None = None,
    ) -> CellResult:
        """Run a cell in this session's persistent Python interpreter (variables survive between calls).

        The kernel runs inside the session's sandbox with the isolation and limits of its
        commands, and sees its files. A cell's exception, timeout or crash is a result, not an
        error; a timeout or crash restarts the kernel, and ``state_lost`` says the earlier cells'
        variables are gone (also when the session had to replace its sandbox). See
        ``docs/kernels.md``.

        Args:
            code: Python source; the last expression's ``repr`` is the result's ``value``.
            timeout_s: wall-clock limit of this cell (default: the session's ``limits.timeout_s``).
            fresh: run in a new interpreter, without the state of earlier cells.
            deadline_s: the call's deadline (queueing included), as for :meth:`run`.
            timeout: the deprecated old name of ``timeout_s``.

        Returns:
            How the cell ended, with its stdout, stderr, value or traceback.

        Raises:
            InvalidRequest: the backend has no kernels (``capabilities.kernels``), ``code`` is
                not a string or ``timeout_s`` is not positive.
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
        timeout_s = renamed(timeout_s, timeout, "timeout", where="python")
        if timeout_s is not None:
            positive_timeout(timeout_s)

        async def cell(sandbox: Sandbox) -> CellResult:
            kernel = await sandbox.open_kernel()
            result = await kernel.run(code, timeout=timeout_s, fresh=fresh)
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

    async def checkpoint(
        self,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        deadline_s: float | None = None,
    ) -> Checkpoint:
        """Freeze this session's files (and ``exec`` defaults) into a :class:`Checkpoint` to fork from.

        The session keeps working; what it does next does not reach the checkpoint. Release the
        checkpoint when done (``async with``, or :meth:`Checkpoint.release`); the pool releases
        the ones left when it closes.

        Args:
            cwd: working directory of ``exec`` in sessions forked from it (default: this session's).
            env: environment added to their ``exec`` calls (default: this session's).
            deadline_s: deadline of taking it (``None``: the pool's default).

        Raises:
            InvalidRequest: the backend cannot fork (``capabilities.fork == "none"``).
            PoolClosed: the session or its pool is closed.
            SandboxError: taking the checkpoint failed (the session's sandbox is then discarded).
        """
        check_forkable(self._core)
        self._check_open()
        cwd = self.cwd if cwd is None else cwd
        env = self.env if env is None else env

        async def take(sandbox: Sandbox) -> Checkpoint:
            snapshot = await sandbox.snapshot()
            # Registered in the same step the snapshot arrives: a cancellation cannot slip in and leak it.
            return Checkpoint(self._core, snapshot, limits=self.limits, cwd=cwd, env=env)

        return await self._call(take, deadline_s)

    async def close(self) -> None:
        """Give the sandbox back: reset and kept warm when possible (a fork's only where ``fork_warm``). Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        with anyio.CancelScope(shield=True):
            parked = self.suspended
            try:
                # A reset or kill needs the processes thawed (v1 delivers SIGKILL to thawed tasks only).
                await self._wake(closing=True)
            except SandboxkitError:
                log.warning("session sandbox could not be resumed at close; it was discarded", exc_info=True)
            if self._entry is not None and parked:
                entry, self._entry = self._entry, None
                await self._core.discard(entry)  # it holds no running slot to give back to the warm ones
            if self._entry is not None:
                entry, self._entry = self._entry, None
                if self.origin is not None and not self._core.backend.capabilities.fork_warm:
                    # A fork's sandbox may pin its checkpoint's layer (copy-on-write): close it rather
                    # than keep it warm, so a released checkpoint's memory goes with its last fork.
                    # Where forks load a copy into warm sandboxes (fork_warm), a reset drops it.
                    await self._core.discard(entry)
                else:
                    await self._core.give_back(entry, dirty=True)
