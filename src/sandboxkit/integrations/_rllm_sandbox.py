"""``RLLMSandbox``: a sandboxkit session behind rLLM's ``rllm.sandbox.protocol.Sandbox``.

rLLM's newer sandbox layer (``rllm/sandbox/``) drives sandboxes through a small synchronous
protocol: ``exec`` returning stdout, file upload/download, ``close`` and ``is_alive``. This
class implements it on any sandboxkit backend; re-exported from :mod:`sandboxkit.integrations.rllm`.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from sandboxkit.integrations._runtime import GRACE_S, BackendLike, PoolHandle, open_session, shared_handle
from sandboxkit.integrations._workspace import WorkspaceMap
from sandboxkit.models import Limits
from sandboxkit.session import Session

__all__ = ["RLLMSandbox"]

log = logging.getLogger(__name__)


class RLLMSandbox:
    """A sandboxkit session behind rLLM's ``rllm.sandbox.protocol.Sandbox`` (sync methods).

    ``exec`` returns stdout and raises ``RuntimeError`` on a non-zero exit, as rLLM's own
    backends do. Absolute paths under ``workdir`` map into the workspace; other absolute
    paths are re-rooted inside it (like rLLM's local backend). ``user`` is accepted and ignored.

    On a backend whose sandboxes have their own root filesystem (``capabilities.absolute_paths``)
    absolute paths are real instead: ``upload_dir(..., "/tests")`` writes ``/tests`` and
    ``exec("cat /tests/a.txt")`` sees it, as rLLM's Harbor-style ``ShellScriptEvaluator``
    expects (it uploads ``/tests``, runs ``test.sh``, reads ``/logs/verifier/reward.txt``). The
    ``docker`` backend named as a string then gets a writable root with ``workdir`` and
    ``/logs/verifier`` given to the program's user, unless ``backend_options`` says otherwise.

    Args:
        name: a label for logs.
        backend: backend name, Backend instance or SyncSandboxPool.
        workdir: the absolute directory that stands for the workspace.
        timeout: default seconds per command (rLLM's local default is 300).
        limits: limits of the sandbox.
        pool_options: options of the (shared, for a name) pool.
        backend_options: options of the backend (when ``backend`` is a name).
    """

    def __init__(
        self,
        name: str = "",
        backend: BackendLike = "subprocess",
        *,
        workdir: str = "/app",
        timeout: float = 300.0,
        limits: Limits | None = None,
        pool_options: Mapping[str, Any] | None = None,
        backend_options: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        self.name = name
        options: dict[str, Any] = {"max_concurrency": 64, "max_sandboxes": 128, **dict(pool_options or {})}
        if backend == "docker" and not (backend_options and "writable_root" in backend_options):
            dirs = (posixpath.normpath(workdir), "/logs/verifier", "/logs/agent")
            backend_options = {**dict(backend_options or {}), "writable_root": True, "writable_dirs": dirs}
        if backend_options:
            options["backend_options"] = dict(backend_options)
        self.handle = shared_handle(backend, **options) if isinstance(backend, str) else PoolHandle(backend, **options)
        self.timeout = timeout
        self.limits = (limits or Limits()).merged(timeout_s=timeout)
        self.workspace = WorkspaceMap(workdir, outside="rebase")
        self._absolute = bool(self.handle.pool.backend.capabilities.absolute_paths)
        self._session: Session | None = self.handle.call(lambda p: open_session(p, self.limits), None)
        pwd = self.handle.call(lambda _p: self._live().exec("pwd", timeout_s=30), 30 + GRACE_S)
        real_workdir = (
            self._absolute
            and self.handle.call(
                lambda _p: self._live().exec(f"test -d {shlex.quote(self.workspace.workdir)}", timeout_s=30),
                30 + GRACE_S,
            ).ok
        )
        # With a real workdir nothing is rewritten: absolute paths are the sandbox's own.
        self._cwd = self.workspace.workdir if real_workdir else None
        self.workspace.bind(self.workspace.workdir if real_workdir else pwd.stdout)

    def _path(self, remote_path: str) -> str:
        """The file-API path for ``remote_path``: itself where absolute paths are real, else in the workspace."""
        path = remote_path.strip()
        inside = path == self.workspace.workdir or path.startswith(self.workspace.workdir.rstrip("/") + "/")
        if self._absolute and path.startswith("/") and (self._cwd is not None or not inside):
            return posixpath.normpath(path)
        return self.workspace.relative(remote_path)

    def _live(self) -> Session:
        if self._session is None:
            raise RuntimeError(f"sandbox {self.name!r} is closed")
        return self._session

    def exec(self, command: str, timeout: float | None = None, user: str | None = None) -> str:
        """Run ``command`` with bash in the workspace; return stdout.

        Raises:
            RuntimeError: the command exited non-zero or timed out (message has the stderr tail).
            SandboxError: the sandbox infrastructure failed.
        """
        t = float(timeout) if timeout else self.timeout
        session = self._live()
        result = self.handle.call(
            lambda _p: session.exec(self.workspace.command(command), cwd=self._cwd, timeout_s=t), t + GRACE_S
        )
        stdout = self.workspace.output(result.stdout)
        if not result.ok:
            tail = self.workspace.output(result.stderr)[-600:]
            raise RuntimeError(
                f"Command failed ({result.status.value}, exit {result.exit_code}) in sandbox {self.name}: "
                f"{command}\nstderr (tail):\n{tail}"
            )
        return stdout

    def upload_file(self, local_path: str, remote_path: str) -> None:
        """Copy a local file into the sandbox."""
        with open(local_path, "rb") as fh:
            data = fh.read()
        rel = self._path(remote_path)
        session = self._live()
        self.handle.call(lambda _p: session.write_files({rel: data}), self.timeout + GRACE_S)

    def upload_dir(self, local_path: str, remote_path: str) -> None:
        """Copy a local directory tree into the sandbox (regular files; symlinks are skipped)."""
        base = self._path(remote_path)
        files: dict[str, bytes | str] = {}
        for root, _dirs, names in os.walk(local_path):
            for fname in names:
                full = os.path.join(root, fname)
                if os.path.islink(full) or not os.path.isfile(full):
                    continue
                rel = os.path.relpath(full, local_path).replace(os.sep, "/")
                with open(full, "rb") as fh:
                    files[f"{base}/{rel}"] = fh.read()
        if files:
            session = self._live()
            self.handle.call(lambda _p: session.write_files(files), self.timeout + GRACE_S)

    def download_file(self, remote_path: str) -> bytes:
        """Read a file out of the sandbox.

        Raises:
            FileNotFoundError: the file does not exist.
        """
        rel = self._path(remote_path)
        session = self._live()
        files = self.handle.call(lambda _p: session.read_files([rel]), self.timeout + GRACE_S)
        if rel not in files:
            raise FileNotFoundError(f"download_file: {remote_path} not found in sandbox {self.name!r}")
        return files[rel]

    def is_alive(self) -> bool:
        """Whether the sandbox still answers. Never raises."""
        if self._session is None:
            return False
        try:
            session = self._session
            return bool(self.handle.call(lambda _p: session.exec("true", timeout_s=10), 10 + GRACE_S).ok)
        except Exception:
            return False

    def close(self) -> None:
        """Release the sandbox. Idempotent; never raises."""
        session, self._session = self._session, None
        if session is not None and self.handle.created:
            try:
                self.handle.call(lambda _p: session.close(), 60)
            except Exception:
                log.warning("closing rLLM sandbox %s failed", self.name, exc_info=True)

    def __enter__(self) -> RLLMSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
