"""``SubprocessBackend``: sandboxes made of local processes, with no extra dependency."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence

from sandboxkit.backends.subprocess._cold import Command, run_cold
from sandboxkit.backends.subprocess._status import classify, rlimits_for
from sandboxkit.backends.subprocess._workspace import SANDBOX_PATH, Workspace, program_env
from sandboxkit.base import Availability, Backend, Capabilities, Sandbox
from sandboxkit.errors import InvalidRequest, SandboxCrashed, ToolchainMissing
from sandboxkit.languages import LANGUAGES, Language, resolve_language
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status

__all__ = ["SubprocessBackend", "SubprocessSandbox"]

log = logging.getLogger(__name__)
NAME = "subprocess"


def _toolchain_present(lang: Language, path: str) -> bool:
    return all(shutil.which(b, path=path) is not None for b in lang.binaries)


class SubprocessSandbox(Sandbox):
    """One workspace directory on this machine; every command runs as an isolated child process."""

    backend_name = NAME

    def __init__(self, backend: SubprocessBackend, limits: Limits) -> None:
        self.id = f"sbx-{secrets.token_hex(6)}"
        self.limits = limits
        self._backend = backend
        path = tempfile.mkdtemp(prefix=f"{self.id}-", dir=backend.root)
        self.workspace = Workspace(os.path.realpath(path))
        self._closed = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxCrashed("the sandbox is closed; open a new one", backend=NAME, sandbox_id=self.id)

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return program_env(self.workspace.path, self._backend.path, extra)

    async def _spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stdin: bytes,
        timeout_s: float,
        limits: Limits,
        address_space: bool,
    ) -> ExecResult:
        cmd = Command(
            argv=argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_s=timeout_s,
            output_bytes=limits.output_bytes,
            rlimits=rlimits_for(limits, timeout_s, address_space=address_space),
        )
        try:
            outcome = await run_cold(cmd)
        except FileNotFoundError:
            return ExecResult(status=Status.FAILED, exit_code=127, stderr=f"{argv[0]}: command not found\n")
        except PermissionError:
            return ExecResult(status=Status.FAILED, exit_code=126, stderr=f"{argv[0]}: permission denied\n")
        return classify(outcome)

    # ------------------------------------------------------------------ contract

    async def run(self, request: RunRequest) -> RunResult:
        """Write the code and files, compile if needed, run with stdin, fetch files.

        Raises:
            ToolchainMissing: the language's compiler or interpreter is not installed here.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        lang = resolve_language(request.language)
        if not _toolchain_present(lang, self._backend.path):
            raise ToolchainMissing(
                f"{lang.name} needs {', '.join(lang.binaries)}, not found on the sandbox PATH {self._backend.path!r}; "
                f"install it with `apt-get install {lang.package}`",
                backend=NAME,
                sandbox_id=self.id,
            )
        limits = request.limits
        async with self._lock:
            self._check_open()
            src = lang.source_name(request.code)
            self.workspace.write({**request.files, src: request.code})
            env = self._env({**lang.env, **request.env})
            compile_result: ExecResult | None = None
            compile_argv = lang.compile_argv(request.code)
            if compile_argv is not None:
                compile_result = await self._spawn(
                    compile_argv,
                    cwd=self.workspace.path,
                    env=env,
                    stdin=b"",
                    timeout_s=limits.compile_timeout_s,
                    limits=limits.merged(output_bytes=max(limits.output_bytes, 1 << 20)),
                    address_space=not lang.virtual_memory_hungry,
                )
                if compile_result.status is not Status.OK:
                    return RunResult(
                        status=Status.COMPILE_ERROR,
                        compile=compile_result,
                        language=lang.name,
                        backend=NAME,
                        sandbox_id=self.id,
                        duration_s=compile_result.duration_s,
                    )
            result = await self._spawn(
                lang.run_argv(request.code, request.argv),
                cwd=self.workspace.path,
                env=env,
                stdin=(request.stdin or "").encode("utf-8"),
                timeout_s=limits.timeout_s,
                limits=limits,
                address_space=not lang.virtual_memory_hungry,
            )
            fetched = self.workspace.read(request.fetch_files) if request.fetch_files else {}
        return RunResult(
            **result.model_dump(),
            compile=compile_result,
            files=fetched,
            language=lang.name,
            backend=NAME,
            sandbox_id=self.id,
        )

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run a shell command (``bash -c``) or an argv list in the workspace.

        Raises:
            InvalidRequest: ``cwd`` escapes the workspace or the timeout is not positive.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            raise InvalidRequest(f"timeout must be a positive number of seconds, got {timeout!r}", backend=NAME)
        workdir = self.workspace.path if cwd in (None, "", ".") else self.workspace.resolve(str(cwd))
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise InvalidRequest("exec needs a non-empty command", backend=NAME, sandbox_id=self.id)
        timeout_s = float(timeout) if timeout is not None else self.limits.timeout_s
        async with self._lock:
            self._check_open()
            if not os.path.isdir(workdir):
                raise InvalidRequest(f"cwd {cwd!r} is not a directory in the workspace", backend=NAME)
            return await self._spawn(
                argv,
                cwd=workdir,
                env=self._env(env),
                stdin=(stdin or "").encode("utf-8"),
                timeout_s=timeout_s,
                limits=self.limits,
                address_space=False,
            )

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Write files into the workspace.

        Raises:
            InvalidRequest: a path is absolute or contains ``..``.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        self.workspace.write(files)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files from the workspace; missing ones are absent.

        Raises:
            InvalidRequest: a path is absolute or contains ``..``.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        return self.workspace.read(paths)

    async def alive(self) -> bool:
        """True until closed (and while the workspace exists). Never raises."""
        return not self._closed and os.path.isdir(self.workspace.path)

    async def reset(self) -> bool:
        """Wipe the workspace; True when the sandbox is clean and reusable."""
        if self._closed:
            return False
        async with self._lock:
            try:
                self.workspace.wipe()
            except OSError:
                log.warning("could not wipe workspace of %s", self.id, exc_info=True)
                return False
        return True

    async def close(self) -> None:
        """Remove the workspace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._backend._forget(self)
        self.workspace.remove()


class SubprocessBackend(Backend):
    """Runs programs as local child processes.

    Args:
        root: directory under which sandbox workspaces are created (default: the system temp dir).
        path: PATH inside the sandbox (default :data:`SANDBOX_PATH`).
    """

    name = NAME

    def __init__(self, *, root: str | None = None, path: str | None = None) -> None:
        self.root = os.path.realpath(root or tempfile.gettempdir())
        self.path = path or SANDBOX_PATH
        self._sandboxes: set[SubprocessSandbox] = set()
        self._caps: Capabilities | None = None

    @property
    def capabilities(self) -> Capabilities:
        """Languages whose toolchains exist here; protections not active on this machine."""
        if self._caps is None:
            langs = frozenset(name for name, lang in LANGUAGES.items() if _toolchain_present(lang, self.path))
            self._caps = Capabilities(
                languages=langs,
                stateful=True,
                network_control=False,
                limits=frozenset({"timeout_s", "compile_timeout_s", "memory_mb", "output_bytes", "file_size_mb"}),
                resettable=True,
                missing_protections=(
                    "user namespace: programs run as the sandboxkit user",
                    "pid namespace: double-forked daemons may outlive a run",
                    "network namespace: network is always on",
                    "mount namespace: programs see the host filesystem",
                ),
            )
        return self._caps

    async def open(self, limits: Limits | None = None) -> SubprocessSandbox:
        """Create a sandbox with a fresh workspace directory."""
        sandbox = SubprocessSandbox(self, limits or Limits())
        self._sandboxes.add(sandbox)
        return sandbox

    def _forget(self, sandbox: SubprocessSandbox) -> None:
        self._sandboxes.discard(sandbox)

    @property
    def live_sandboxes(self) -> int:
        """Sandboxes opened by this backend object and not yet closed."""
        return len(self._sandboxes)

    async def aclose(self) -> None:
        """Close every sandbox this backend opened."""
        for sandbox in list(self._sandboxes):
            await sandbox.close()

    def emergency_cleanup(self) -> None:
        """Remove workspaces synchronously at interpreter exit."""
        for sandbox in list(self._sandboxes):
            sandbox._closed = True
            sandbox.workspace.remove()
        self._sandboxes.clear()

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Always usable: it needs only this machine."""
        del options
        return Availability(True)
