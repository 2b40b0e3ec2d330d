"""What the cloud backends (Daytona, E2B) share on the sandbox side: a Sandbox built on three primitives.

A cloud sandbox gives us three primitives: upload files, download files, and run one shell
command and get its stdout, stderr and exit code back. Everything else in the
:class:`~sandboxkit.base.Sandbox` contract is built here on top of them, once, so both
services run a program the same way:

* source code, input files and stdin are written through the service's *file API* (never
  by echoing them through a shell), under ``sandboxkit-ws/`` (the workspace) and
  ``sandboxkit-ctl/`` (our control files) in the sandbox user's home;
* every step runs under the small bash wrapper of :mod:`sandboxkit.backends._wrapper`, which
  enforces the time, output, CPU-time, file-size and (where the runtime allows it) memory
  limits *inside* the sandbox and returns the program's streams byte-exact, head and tail
  kept past the cap;
* the host waits a grace period longer than the limit; if the service still has not
  answered, the backend kills what it can, and the sandbox is marked tainted so the pool
  replaces it rather than reusing it.

``network`` is not the wrapper's: the service fixes it when the sandbox is created (see
:mod:`sandboxkit.backends._cloud_backend` and each backend's ``_create``).

Why a wrapper rather than the services' own timeouts: both SDKs stop *waiting* at their
timeout but leave the process running in the sandbox (E2B#500; a Daytona session command
keeps its shell busy), so a pooled sandbox would keep burning CPU on the previous run.
"""

from __future__ import annotations

import abc
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

import anyio
from pydantic import SecretStr

from sandboxkit.backends._exactly_once import once_script
from sandboxkit.backends._wrapper import (
    CONTROL_DIR,
    WORKSPACE_DIR,
    RawResult,
    Step,
    build_script,
    kill_script,
    output_caps,
    parse_result,
    reset_script,
)
from sandboxkit.base import Snapshot
from sandboxkit.errors import InvalidRequest, SandboxCrashed, SandboxkitError, Transient
from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult, Status, check_sandbox_path
from sandboxkit.streaming import BufferedSandbox

__all__ = [
    "CONTROL_DIR",
    "CREATE_LABEL",
    "ENFORCED_LIMITS",
    "INSTANCE_LABEL",
    "LABEL",
    "WORKSPACE_DIR",
    "CloudSandbox",
    "NoAnswer",
    "RawResult",
    "never_sent",
    "redact",
    "resolve_secret",
]

#: Label / metadata key every sandbox created by sandboxkit carries (value ``"1"``).
LABEL = "sandboxkit"
#: Limits fields every cloud backend enforces: the wrapper applies all but ``network``, which
#: the service sets when it creates the sandbox.
ENFORCED_LIMITS = frozenset({"timeout_s", "compile_timeout_s", "output_bytes", "file_size_mb", "network"})
#: Label naming the backend object that created the sandbox (for emergency clean-up).
INSTANCE_LABEL = "sandboxkit-backend"
#: Label unique to one creation attempt, so a create that timed out can still be found.
CREATE_LABEL = "sandboxkit-create"

log = logging.getLogger(__name__)
#: Times a command whose connection dropped is sent again under its id (see :meth:`CloudSandbox._step`).
RESENDS = 4


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret replaced by ``***`` (for messages built from SDK errors)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def never_sent(exc: BaseException) -> bool:
    """Whether a failed call provably never reached the service (the connection was never made).

    Only then can a failed *create* be known not to have created anything; any other failure
    (a timeout, a reset, a 5xx) may have, and must be followed by a search.
    """
    import httpx

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionRefusedError, httpx.ConnectError)):
            return True
        if type(current).__name__ == "ClientConnectorError":  # aiohttp's "could not connect"
            return True
        current = current.__cause__ or current.__context__
    return False


def resolve_secret(value: str | SecretStr | None, env_value: str | None) -> SecretStr | None:
    """An option, else the environment value, as a :class:`SecretStr` (so it never prints)."""
    if isinstance(value, SecretStr):
        return value if value.get_secret_value() else None
    chosen = value or env_value
    return SecretStr(chosen) if chosen else None


class NoAnswer(Exception):
    """The service did not finish a command within the host deadline (raised by ``_shell``)."""


class CloudHost(Protocol):
    """What a :class:`CloudSandbox` needs of its backend (a :class:`~._cloud_backend.CloudBackend`).

    Named here rather than imported: the backend module builds sandboxes, so importing it back
    would make the two files a circle.
    """

    @property
    def name(self) -> str: ...
    @property
    def grace_s(self) -> float: ...

    def map_error(self, exc: BaseException, *, op: str, sandbox_id: str | None = None) -> SandboxkitError:
        """Translate an SDK / transport error raised during ``op`` into the sandboxkit error tree."""
        ...

    def sandbox_closed(self, sandbox_id: str, *, deleted: bool) -> None:
        """``sandbox_id`` was closed: deleted at the service, or (``deleted=False``) cut short, so delete it later."""
        ...

    def snapshot_name(self) -> str:
        """A fresh name for a checkpoint; ``cleanup`` finds leftovers by its prefix."""
        ...

    def adopt_snapshot(self, snapshot_id: str) -> Snapshot:
        """The handle of a checkpoint just taken at the service, which the backend now tracks."""
        ...


class CloudSandbox(BufferedSandbox):
    """A :class:`Sandbox` built on three service primitives: upload, download, shell.

    Subclasses implement the primitives (and ``alive`` / ``_destroy``); this class writes code
    and files, compiles, runs, classifies and fetches, maps SDK errors (through its backend)
    and closes, identically for every cloud service.

    Attributes:
        grace_s: how much longer than a step's limit the host waits for the service.
        tainted: a command outlived the host deadline; processes may survive in the
            sandbox, so ``reset`` refuses and the pool replaces it.
    """

    def __init__(self, backend: CloudHost, *, sandbox_id: str, limits: Limits) -> None:
        self._backend = backend
        self.backend_name = backend.name
        self.id = sandbox_id
        self.limits = limits
        self.grace_s = backend.grace_s
        self.tainted = False
        self.closed = False
        #: Absolute directory holding the workspace; "" = the service's default (the user's home).
        self.root = ""
        #: Id of the last command answered, whose saved streams the next command removes.
        self._answered: str | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id!r} closed={self.closed}>"

    def _at(self, rel: str) -> str:
        """Path of ``rel`` (relative to the root) as the service's file API should see it."""
        return f"{self.root.rstrip('/')}/{rel}" if self.root else rel

    # ------------------------------------------------------------------ primitives

    @abc.abstractmethod
    async def _upload(self, files: Mapping[str, bytes]) -> None:
        """Write files (paths from :meth:`_at`; parent directories created)."""

    @abc.abstractmethod
    async def _download(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files (paths from :meth:`_at`), keyed by the given path; missing ones are absent."""

    @abc.abstractmethod
    async def _shell(self, command: str, *, deadline_s: float) -> RawResult:
        """Run a shell command line; raise :class:`NoAnswer` after killing it if ``deadline_s`` passes."""

    @abc.abstractmethod
    async def _take_snapshot(self, name: str) -> str:
        """Snapshot the sandbox at the service under ``name``; the snapshot's id (SDK errors propagate)."""

    async def _control(self, command: str, *, deadline_s: float = 30.0) -> RawResult:
        """Run one of our own short commands (kill, reset); services may use a cheaper path."""
        return await self._shell(command, deadline_s=deadline_s)

    @abc.abstractmethod
    async def _destroy(self) -> None:
        """Delete the sandbox at the service (called once, shielded, by :meth:`close`)."""

    async def snapshot(self) -> Snapshot:
        """Checkpoint the sandbox with the service's snapshot API (:meth:`_take_snapshot`).

        Named ``sandboxkit-...`` so ``cleanup`` finds leftovers.

        Raises:
            SandboxCrashed: the sandbox is closed or gone.
            RateLimited, Transient: the service refused or failed for now.
        """
        if self.closed:
            raise SandboxCrashed("the sandbox is closed; open a new one", backend=self.backend_name, sandbox_id=self.id)
        try:
            snapshot_id = await self._take_snapshot(self._backend.snapshot_name())
        except Exception as exc:
            raise await self._fail(exc, "snapshot the sandbox") from exc
        return self._backend.adopt_snapshot(snapshot_id)

    # ------------------------------------------------------------------ errors and lifetime

    async def _fail(self, exc: BaseException, op: str) -> SandboxkitError:
        """The sandboxkit error for an SDK failure during ``op``; a Transient from a dead sandbox is a crash."""
        err = self._backend.map_error(exc, op=op, sandbox_id=self.id)
        if type(err) is Transient and not await self.alive():
            err = SandboxCrashed(
                f"the sandbox stopped answering during {op} and is gone; it is discarded",
                backend=self.backend_name,
                sandbox_id=self.id,
            )
        return err

    async def close(self) -> None:
        """Delete the sandbox (idempotent, shielded: a cancelled caller still frees it)."""
        if self.closed:
            return
        self.closed = True
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                try:
                    await self._destroy()
                except Exception as exc:
                    gone = self._backend.map_error(exc, op="delete the sandbox", sandbox_id=self.id)
                    if not isinstance(gone, SandboxCrashed):  # already gone is fine
                        log.warning("deleting %s sandbox %s failed: %s", self.backend_name, self.id, type(exc).__name__)
        except BaseException:
            # A delete cut short by a native cancellation (asyncio.run's Ctrl-C cancels through anyio's
            # shield): the backend's aclose (or exit cleanup) deletes it instead.
            self._backend.sandbox_closed(self.id, deleted=False)
            raise
        self._backend.sandbox_closed(self.id, deleted=True)

    # ------------------------------------------------------------------ shared logic

    def _crashed(self, message: str) -> SandboxCrashed:
        return SandboxCrashed(message, backend=self.backend_name, sandbox_id=self.id)

    async def _send_once(self, step: Step) -> RawResult:
        """Run ``step`` exactly once, sending it again under its id while its connection drops.

        A dropped call (a ``Transient`` error, the sandbox still alive) may or may not have run
        the command; the resend runs it only if the first copy never arrived, and otherwise
        waits for that copy and replays its exit code and output (see
        :mod:`sandboxkit.backends._exactly_once`). So a resend is safe for any command, and it
        is the backend's, not the pool's: the pool never retries a started session command.
        """
        deadline = time.monotonic() + step.timeout_s + self.grace_s
        script = once_script(
            build_script(step, self.root),
            step.run_id,
            root=self.root,
            wait_s=step.timeout_s + self.grace_s,
            previous=self._answered,
        )
        for resend in range(RESENDS + 1):
            try:
                raw = await self._shell(script, deadline_s=max(1.0, deadline - time.monotonic()))
            except Transient as exc:
                if resend == RESENDS or time.monotonic() >= deadline:
                    raise
                log.info("%s: command %s lost its connection (%s); sending it again", self.id, step.run_id, exc)
                await anyio.sleep(min(0.05 * 2**resend, 1.0))
                continue
            self._answered = step.run_id
            return raw
        raise AssertionError("unreachable")  # pragma: no cover

    async def _step(self, step: Step) -> ExecResult:
        started = time.monotonic()
        try:
            raw = await self._send_once(step)
        except NoAnswer:
            self.tainted = True
            try:
                await self._control(kill_script(self.root), deadline_s=max(10.0, self.grace_s))
            except Exception as exc:
                raise self._crashed(
                    f"the service did not answer within {step.timeout_s + self.grace_s:g}s and the sandbox could "
                    f"not be reached to kill the command ({type(exc).__name__}); the sandbox is discarded"
                ) from exc
            return ExecResult(status=Status.TIMEOUT, duration_s=time.monotonic() - started)
        return parse_result(raw, step, backend=self.backend_name, sandbox_id=self.id)

    async def _run_buffered(self, request: RunRequest) -> RunResult:
        """See :meth:`Sandbox.run`; code, files and stdin go through the file API."""
        lang: Language = resolve_language(request.language)
        limits = request.limits
        source = lang.source_name(request.code)
        run_id = uuid.uuid4().hex[:12]
        uploads: dict[str, bytes] = {self._at(f"{WORKSPACE_DIR}/{source}"): lang.prepare(request.code).encode("utf-8")}
        for path, data in request.files.items():
            uploads[self._at(f"{WORKSPACE_DIR}/{path}")] = data
        stdin_file = f"{CONTROL_DIR}/{run_id}.stdin" if request.stdin is not None else None
        if stdin_file is not None:
            assert request.stdin is not None
            uploads[self._at(stdin_file)] = request.stdin.encode("utf-8")
        await self._upload(uploads)
        env = {**lang.env, **request.env}
        memory = None if lang.virtual_memory_hungry else limits.memory_mb
        compile_result: ExecResult | None = None
        compile_argv = lang.compile_argv(request.code)
        if compile_argv is not None:
            compile_result = await self._step(
                Step(
                    argv=compile_argv,
                    env=env,
                    timeout_s=limits.compile_timeout_s,
                    **output_caps(limits),
                    file_size_mb=None,
                    memory_mb=None,
                    binaries=lang.binaries,
                    run_id=run_id + "c",
                )
            )
            if not compile_result.ok:
                return RunResult(
                    status=Status.COMPILE_ERROR,
                    exit_code=compile_result.exit_code,
                    compile=compile_result,
                    language=lang.name,
                    backend=self.backend_name,
                    sandbox_id=self.id,
                    duration_s=compile_result.duration_s,
                )
        result = await self._step(
            Step(
                argv=lang.run_argv(request.code, request.argv),
                env=env,
                stdin_file=stdin_file,
                timeout_s=limits.timeout_s,
                **output_caps(limits),
                file_size_mb=limits.file_size_mb,
                memory_mb=memory,
                binaries=() if compile_argv is not None else lang.binaries,
                run_id=run_id,
            )
        )
        fetched: dict[str, bytes] = {}
        if request.fetch_files:
            fetched = await self.read_files(request.fetch_files)
        return RunResult(
            **result.model_dump(),
            compile=compile_result,
            files=fetched,
            language=lang.name,
            backend=self.backend_name,
            sandbox_id=self.id,
        )

    async def _exec_buffered(self, request: ExecRequest) -> ExecResult:
        """See :meth:`Sandbox.exec`; a string runs under ``bash -c``."""
        cwd, stdin = request.cwd, request.stdin
        rel = ""
        if cwd not in (None, "", "."):
            try:
                rel = check_sandbox_path(str(cwd), absolute_ok=True) if str(cwd).strip("/") else "/"
            except ValueError as exc:
                raise InvalidRequest(str(exc), backend=self.backend_name, sandbox_id=self.id) from exc
        run_id = uuid.uuid4().hex[:12]
        stdin_file = None
        if stdin is not None:
            stdin_file = f"{CONTROL_DIR}/{run_id}.stdin"
            await self._upload({self._at(stdin_file): stdin.encode("utf-8")})
        return await self._step(
            Step(
                argv=request.argv(),
                cwd=rel,
                env=dict(request.env),
                stdin_file=stdin_file,
                timeout_s=float(request.timeout_s or self.limits.timeout_s),
                **output_caps(self.limits),
                file_size_mb=self.limits.file_size_mb,
                run_id=run_id,
            )
        )

    def _workspace_paths(self, paths: Sequence[str]) -> list[str]:
        """Checked paths: relative to the workspace, or absolute in the sandbox's own filesystem.

        A cloud sandbox is a whole machine of its own, so an absolute path goes to the service's
        file API as it is: the service resolves it there, never on this host.
        """
        try:
            return [check_sandbox_path(p, absolute_ok=True) for p in paths]
        except ValueError as exc:
            raise InvalidRequest(str(exc), backend=self.backend_name, sandbox_id=self.id) from exc

    def _remote(self, checked: str) -> str:
        return checked if checked.startswith("/") else self._at(f"{WORKSPACE_DIR}/{checked}")

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """See :meth:`Sandbox.write_files`; absolute paths are in the sandbox's own filesystem."""
        rel = self._workspace_paths(list(files))
        data = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in files.values()]
        if rel:
            await self._upload({self._remote(p): d for p, d in zip(rel, data, strict=True)})

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """See :meth:`Sandbox.read_files`; absolute paths are in the sandbox's own filesystem."""
        rel = self._workspace_paths(paths)
        if not rel:
            return {}
        full = [self._remote(p) for p in rel]
        got = await self._download(full)
        return {orig: got[f] for orig, f in zip(paths, full, strict=True) if f in got}

    async def reset(self) -> bool:
        """Kill leftover runs and empty the workspace; False when the sandbox cannot be trusted."""
        if self.tainted or self.closed:
            return False
        try:
            raw = await self._control(reset_script(self.root))
        except Exception:
            return False
        return raw.exit_code == 0
