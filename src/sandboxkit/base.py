"""The two contracts every backend implements: :class:`Sandbox` and :class:`Backend`.

A *sandbox* is one isolated workspace whose files persist across calls until ``close``.
A *backend* creates sandboxes. The pool (``sandboxkit.pool``) sits on top and owns all
policy: caps, rate limits, retries, deadlines, warm reuse. Backends stay simple: do one
thing, report infrastructure failures as :mod:`sandboxkit.errors`, and report the
program's own failures as data in the result.

The behaviour is pinned by the conformance suite in :mod:`sandboxkit.testing`, which every
built-in backend passes and a plugin author runs against a new one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, TypeVar

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult

if TYPE_CHECKING:
    from sandboxkit.configs import BaseBackendConfig
    from sandboxkit.kernel import Kernel

__all__ = [
    "FORK_LEVELS",
    "Availability",
    "Backend",
    "Capabilities",
    "OutputCallback",
    "Sandbox",
    "Snapshot",
    "own_snapshot",
]


#: An ``on_stdout`` / ``on_stderr`` callback: called with each chunk of the program's raw output
#: bytes as it arrives (see :mod:`sandboxkit.streaming` for the rules).
OutputCallback = Callable[[bytes], object]

#: The values of :attr:`Capabilities.fork`, from least to most carried into a fork.
FORK_LEVELS = ("none", "files", "files+processes", "memory")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, so callers never assume a protection that is not there.

    Attributes:
        languages: canonical language names it can run (see :mod:`sandboxkit.languages`).
        stateful: files written by one call are seen by the next call on the same sandbox.
        network_control: it can turn the program's network off (``Limits.network=False``).
        limits: names of :class:`~sandboxkit.models.Limits` fields it enforces.
        resettable: ``reset()`` wipes the workspace cheaply, so the pool can reuse a sandbox
            for unrelated runs; when False the pool closes a sandbox after each pooled run.
        missing_protections: human-readable protections this backend would normally apply
            but cannot on this machine (``"network namespace: kernel refused unshare"``).
        streaming: ``on_stdout`` / ``on_stderr`` callbacks get output chunks while the program
            runs. When False they are called once each with the final output after it ends
            (so callers need no special case; they just see it late).
        absolute_paths: file operations and commands accept absolute paths inside the
            sandbox's own root filesystem (``/testbed``, ``/tests``, ``/logs``), which the shell
            sees too. When False only workspace-relative paths are accepted.
        kernels: ``Session.python`` keeps a persistent Python interpreter in the sandbox
            (:meth:`Sandbox.open_kernel`).
        fork: how much of a sandbox a checkpoint/fork carries: ``"none"`` (cannot fork),
            ``"files"``, ``"files+processes"`` or ``"memory"`` (process memory too). A kernel's
            variables live in process memory: only ``"memory"`` carries them into a fork; on
            any other backend the fork's first cell starts a new kernel and its result says
            ``state_lost`` (the state must be rebuilt by running the cells again).
        fork_warm: a fork can start in a warm idle sandbox of the pool (reset, so as clean as a
            new one) into which the checkpoint is loaded (:meth:`Sandbox.restore`), instead of
            in a new sandbox; a fork's sandbox then goes back to the idle ones (reset) when its
            session closes, since it holds nothing of its checkpoint after a reset.
        suspend: what :meth:`Sandbox.suspend` keeps while the sandbox holds no CPU: ``"none"``
            (it cannot suspend), ``"files"``, or ``"files+memory"`` (kernel variables and
            the threads and processes alive between calls come back as they were).
    """

    languages: frozenset[str]
    stateful: bool = True
    network_control: bool = True
    limits: frozenset[str] = frozenset()
    resettable: bool = True
    missing_protections: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    streaming: bool = False
    absolute_paths: bool = False
    kernels: bool = False
    fork: str = "none"
    fork_warm: bool = False
    suspend: str = "none"


@dataclass(frozen=True)
class Availability:
    """Whether a backend can be used here, and if not, why and what to do."""

    usable: bool
    reason: str = ""


class Snapshot(abc.ABC):
    """A frozen copy of one sandbox (its files, and more where ``Capabilities.fork`` says so).

    The backend-level half of ``Session.checkpoint()``: :meth:`Sandbox.snapshot` takes one and
    :meth:`Backend.open_from` opens new, independent sandboxes from it. It lives until
    :meth:`release`, independently of the sandbox it was taken from and of the sandboxes opened
    from it (those keep working after both are gone).

    Attributes:
        id: identifier (a directory, an image id, a cloud snapshot id).
        backend_name: name of the backend that took it.
        released: :meth:`release` ran; nothing can be opened from it any more.
    """

    id: str
    backend_name: str
    released: bool = False

    @abc.abstractmethod
    async def release(self) -> None:
        """Free what the snapshot holds. Idempotent, finishes under cancellation, never raises."""

    def release_sync(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Synchronous best-effort :meth:`release` for interpreter exit (no event loop needed)."""


S = TypeVar("S", bound=Snapshot)


def own_snapshot(snapshot: Snapshot, kind: type[S], mine: Callable[[S], bool], backend: str) -> S:
    """``snapshot`` as a checkpoint this backend object may open or restore: its ``kind``, ``mine``, not released.

    What every forking backend's ``open_from`` and ``restore`` check first, with the same words.

    Raises:
        InvalidRequest: ``snapshot`` was taken by another backend object (or kind of backend), or released.
    """
    if not isinstance(snapshot, kind) or not mine(snapshot):
        raise InvalidRequest(
            f"cannot open a {backend} sandbox from {snapshot!r}: it was taken by another backend object",
            backend=backend,
        )
    if snapshot.released:
        raise InvalidRequest(
            f"checkpoint {snapshot.id} was released; fork before releasing it, or take a new one", backend=backend
        )
    return snapshot


class Sandbox(abc.ABC):
    """One isolated workspace. Methods are coroutines; a sandbox is used by one call at a time.

    Attributes:
        id: identifier of the sandbox (container id, cloud sandbox id, local slot name).
        backend_name: name of the backend that created it.
    """

    id: str
    backend_name: str

    @abc.abstractmethod
    async def run(
        self,
        request: RunRequest,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> RunResult:
        """Write ``request.code`` and ``request.files``, compile if needed, run with stdin, fetch files.

        ``on_stdout`` / ``on_stderr`` get the program's output as it is written (not the
        compiler's), under the rules of :mod:`sandboxkit.streaming`; the result is the same
        with or without them. A backend that cannot stream calls them once after the run.

        Returns:
            A result whose ``status`` says how the *program* ended.

        Raises:
            InvalidRequest: the language is not supported by this backend (one of
                :mod:`sandboxkit.languages` missing from ``capabilities.languages``).
            ToolchainMissing: the language's toolchain is not installed where the code runs (also for a
                language that ``capabilities.languages`` leaves out for that reason).
            SandboxCrashed: the sandbox was closed, or died or vanished during the call.
            Transient: a passing fault talking to the sandbox; safe to retry on a fresh sandbox.
            RateLimited: the service refused the call for now (a :class:`Transient`).
        """

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecResult:
        """Run a shell command (a string, run by ``bash -c``) or an argv list in the workspace.

        ``cwd`` is relative to the workspace, or (``capabilities.absolute_paths``) an absolute
        directory of the sandbox's own filesystem. ``timeout`` overrides the sandbox's
        ``limits.timeout_s`` for this call. Other limits are those the sandbox was opened with.
        ``on_stdout`` / ``on_stderr`` get the output while the command runs (rules in
        :mod:`sandboxkit.streaming`; once at the end when ``capabilities.streaming`` is False).

        The arguments are checked once here and handed to :meth:`exec_request` as one
        :class:`~sandboxkit.models.ExecRequest`; a backend implements that (a plugin written
        against the keyword form may override this method instead).

        Raises:
            InvalidRequest: ``cwd`` escapes the workspace (with ``..``, or absolute where the
                backend has no absolute paths), the command is an empty list, or the timeout is
                not positive.
            SandboxCrashed: the sandbox was closed, or died or vanished during the call.
            Transient: a passing fault talking to the sandbox.
        """
        request = ExecRequest.of(
            command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, backend=self.backend_name, sandbox_id=self.id
        )
        return await self.exec_request(request, on_stdout=on_stdout, on_stderr=on_stderr)

    async def exec_request(
        self,
        request: ExecRequest,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecResult:
        """:meth:`exec` with its arguments checked and bundled: what a backend implements.

        It raises what :meth:`exec` documents. Not abstract, so a plugin that overrides :meth:`exec`
        itself (the form before ``ExecRequest``) still instantiates; one that implements neither
        gets ``NotImplementedError`` here, on its first ``exec``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither exec_request() nor exec(); implement exec_request"
        )

    @abc.abstractmethod
    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Write files (paths relative to the workspace; parents created).

        Where ``capabilities.absolute_paths`` is true, an absolute path (``/testbed/x.txt``) names
        a file in the sandbox's own root filesystem, which programs see too; symlinks are
        resolved inside the sandbox, never on the host. Every path is checked before anything
        is written, so a bad path writes nothing.

        Raises:
            InvalidRequest: a path is empty, absolute (where the backend has no absolute paths),
                contains a NUL byte or a ``..`` component, or lies where the host cannot reach
                (see :func:`sandboxkit.models.check_sandbox_path`).
            SandboxCrashed: the sandbox was closed or is gone.
            Transient: a passing fault talking to the sandbox.
        """

    @abc.abstractmethod
    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files; paths that do not exist are absent from the returned mapping.

        Absolute paths as in :meth:`write_files`; the keys are the paths normalised.

        Raises:
            InvalidRequest: a path is empty, absolute (where the backend has no absolute paths),
                contains a NUL byte or a ``..`` component.
            SandboxCrashed: the sandbox was closed or is gone.
            Transient: a passing fault talking to the sandbox.
        """

    @abc.abstractmethod
    async def alive(self) -> bool:
        """Cheap liveness check; ``False`` means the pool should discard this sandbox. Never raises."""

    async def reset(self) -> bool:
        """Return the workspace to its freshly opened state (files removed, no processes left).

        Returns:
            True if the sandbox is clean and reusable; False if it cannot reset, is closed, or its
            own machinery was disturbed by the last program (the pool then closes it). The
            default cannot. Never raises: any failure to reset is ``False``.
        """
        return False

    async def snapshot(self) -> Snapshot:
        """Freeze the workspace's current files into a :class:`Snapshot` (``Session.checkpoint``).

        The sandbox keeps working; later changes to it do not reach the snapshot.

        Raises:
            InvalidRequest: the backend cannot fork (``capabilities.fork == "none"``); the default.
            SandboxCrashed: the sandbox was closed or is gone.
            Transient: a passing fault talking to the sandbox.
        """
        raise InvalidRequest(
            f"backend {self.backend_name!r} cannot checkpoint or fork a sandbox (capabilities.fork is 'none'); "
            "use a backend whose capabilities.fork is 'files' or more (subprocess, docker, e2b, daytona)",
            backend=self.backend_name,
            sandbox_id=self.id,
        )

    async def restore(self, snapshot: Snapshot) -> bool:
        """Load ``snapshot`` into this sandbox, whose workspace is empty (new, or just reset).

        Only called where ``capabilities.fork_warm`` is true: the pool forks into a warm idle
        sandbox instead of opening a new one. The sandbox is then as a new one opened by
        :meth:`Backend.open_from` would be, and as independent of the snapshot.

        Returns:
            True if the snapshot's files are in place; False if not (another backend's or a
            released snapshot, the sandbox closed or broken, the load failed): the pool then
            discards this sandbox, whose state is unknown, and opens a new one from the
            snapshot. The default cannot. Never raises but on cancellation.
        """
        del snapshot
        return False

    async def suspend(self) -> bool:
        """Stop everything the sandbox runs between calls, so it holds no CPU (``capabilities.suspend``).

        Returns:
            True once it is suspended; False where it cannot be (the default): nothing changed.
            The next call must come after :meth:`resume`.
        """
        return False

    async def resume(self) -> None:
        """Let a suspended sandbox run again, with what ``capabilities.suspend`` says survived. Idempotent."""
        return None  # the default never suspends, so there is nothing to resume

    async def open_kernel(self) -> Kernel:
        """This sandbox's persistent Python kernel (``capabilities.kernels``), started on its first cell.

        The same object until ``reset`` or ``close``, which kill it (and every process it
        started). The kernel runs with the same isolation and limits as the sandbox's commands.

        Raises:
            InvalidRequest: this backend has no kernels (``capabilities.kernels`` is False).
            SandboxCrashed: the sandbox is closed.
        """
        raise InvalidRequest(
            f"the {self.backend_name!r} backend has no Python kernels (capabilities.kernels is False); "
            "use the subprocess or docker backend, or run whole programs with run()",
            backend=self.backend_name,
            sandbox_id=getattr(self, "id", None),
        )

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything the sandbox holds. Idempotent; must finish even when cancelled."""


class Backend(abc.ABC):
    """Creates sandboxes of one kind. Constructed through :func:`sandboxkit.backend`.

    Attributes:
        name: registry name (``"subprocess"``, ``"docker"``...).
        config_model: the options model (a :class:`~sandboxkit.configs.BaseBackendConfig`) of a backend
            whose constructor takes ``config=``; the registry then builds the config once and hands it
            over. ``None``: the constructor takes plain keyword options.
        owner_ttl_s: the dead-man switch's TTL: how long this process's sandboxes outlive it
            when it dies without closing them (a pool sets it from its deadlines,
            :func:`sandboxkit._watchdog.ttl_for`; ``None``: from the default limits).
    """

    name: str = ""
    config_model: ClassVar[type[BaseBackendConfig] | None] = None
    owner_ttl_s: float | None = None

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """What this backend can do on this machine."""

    @abc.abstractmethod
    async def open(self, limits: Limits | None = None) -> Sandbox:
        """Create a fresh sandbox whose runs use ``limits`` unless a request says otherwise.

        Raises:
            BackendUnavailable: the backend cannot create sandboxes here (SDK, engine, key).
            CapacityExceeded: the service is at its concurrent-sandbox or quota limit (a
                :class:`RateLimited`); the pool lowers its sandbox cap and queues instead of failing.
            RateLimited: the service refused the creation for now.
            Transient: a passing fault; the pool retries.
        """

    async def open_from(self, snapshot: Snapshot, limits: Limits | None = None) -> Sandbox:
        """Open a new sandbox whose workspace starts as ``snapshot`` (copy-on-write where it can).

        The new sandbox is independent: its writes reach neither the snapshot, nor the sandbox
        the snapshot was taken from, nor other sandboxes opened from it.

        Raises:
            InvalidRequest: the backend cannot fork (the default), or ``snapshot`` is another
                backend's or already released.
            BackendUnavailable, CapacityExceeded, RateLimited, Transient: as :meth:`open`.
        """
        del snapshot, limits
        raise InvalidRequest(
            f"backend {self.name!r} cannot open a sandbox from a checkpoint (capabilities.fork is 'none')",
            backend=self.name,
        )

    def preload_python_module(self, name: str, source: str) -> bool:
        """Keep sandboxkit's own module ``name`` (its ``source``) loaded in this backend's warm interpreters.

        For harnesses that sandboxkit ships (the judge's), never for a program's code: a backend with
        warm interpreters (the subprocess backend's fork servers) runs ``source`` once per interpreter,
        before any program exists, so a program finds the module in ``sys.modules`` and pays neither
        its compilation nor its definitions. Interpreters started before the call get it at their next
        start (the subprocess backend restarts an idle server that lacks it before its next command).

        Returns whether the backend will offer the module. ``False`` (the default: no warm interpreter)
        means programs must carry the code themselves. ``True`` is a promise about loading, not about
        success: an interpreter that cannot run ``source`` (an older Python in an image) leaves the
        module out, so a program must check ``sys.modules`` and have a way back.
        """
        del name, source
        return False

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release backend-wide resources (HTTP clients, engine connections). Idempotent."""

    async def cleanup(self) -> int:
        """Remove everything any sandboxkit process created with this backend's label.

        Used after a crash (``sandboxkit cleanup --backend NAME``). Returns how many
        sandboxes were removed.
        """
        return 0

    def emergency_cleanup(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Synchronously remove what *this* backend object created; called at interpreter exit.

        Must not need a running event loop. Best effort: never raises.
        """

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Whether this backend can work on this machine with these options (no side effects)."""
        return Availability(True)
