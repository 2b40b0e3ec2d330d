"""Building a validated :class:`~sandboxkit.models.RunRequest` from the pool's keyword arguments.

Shared by :class:`~sandboxkit.pool.SandboxPool` and :class:`~sandboxkit.session.Session`, so a bad
request is rejected the same way (an ``InvalidRequest`` naming the field) before anything starts.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import ValidationError

from sandboxkit.base import OutputCallback
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult
from sandboxkit.streaming import check_callbacks, exec_streaming, run_streaming

if TYPE_CHECKING:
    from sandboxkit._lease import LeaseCore
    from sandboxkit._workers._set import WorkerSet
    from sandboxkit.base import Sandbox

__all__ = ["RunsPrograms", "make_request", "positive_timeout", "renamed", "validation_message"]

T = TypeVar("T")


@overload
def renamed(new: None, old: T, name: str, *, where: str, stacklevel: int = 3) -> T: ...
@overload
def renamed(new: T | None, old: T | None, name: str, *, where: str, stacklevel: int = 3) -> T | None: ...
def renamed(new: T | None, old: T | None, name: str, *, where: str, stacklevel: int = 3) -> T | None:
    """The value of a parameter renamed to say its unit: ``new``, or ``old`` with a :class:`DeprecationWarning`.

    Durations are named ``<what>_s`` everywhere; the names from before (``timeout``,
    ``backoff_base``...) keep working for one release. ``name`` is the old name; the new one is
    ``name + "_s"``.

    Raises:
        InvalidRequest: both names were given (which one was meant cannot be told).
    """
    if old is None:
        return new
    if new is not None:
        raise InvalidRequest(f"{where}: pass {name}_s= only ({name}= is its deprecated old name)")
    warnings.warn(
        f"{where}: {name}= is deprecated; use {name}_s= (the same seconds)", DeprecationWarning, stacklevel=stacklevel
    )
    return old


class RunsPrograms:
    """The ``run`` and ``exec`` methods shared by :class:`~sandboxkit.pool.SandboxPool` and :class:`~sandboxkit.session.Session`.

    Both take the same keywords, validate them the same way and check the language against the
    backend before anything starts; they differ only in which sandbox serves the call (a fresh
    one from the pool, or the session's own), which is :meth:`_call`, and in a session's
    ``exec`` defaults, which is :meth:`_exec_defaults`. Written once here, the keyword lists and
    their docstrings cannot drift between the two (nor from the blocking twins, which are
    generated from these methods).
    """

    limits: Limits
    _core: LeaseCore
    #: The host worker processes that serve pooled runs (a multi-process pool), or ``None``.
    _workers: WorkerSet | None = None

    async def _call(self, fn: Callable[[Sandbox], Awaitable[T]], deadline_s: float | None) -> T:
        raise NotImplementedError

    def _exec_defaults(
        self, cwd: str | None, env: Mapping[str, str] | None
    ) -> tuple[str | None, Mapping[str, str] | None]:
        """The ``cwd`` and ``env`` an ``exec`` runs with: the call's own (a session adds its defaults)."""
        return cwd, env

    async def run(
        self,
        code: str | RunRequest | Mapping[str, Any],
        *,
        language: str | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        fetch_files: Sequence[str] | None = None,
        limits: Limits | None = None,
        timeout_s: float | None = None,
        deadline_s: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run a program: in a fresh-state sandbox from a pool, in a session's own sandbox (files persist).

        Args:
            code: source code, or a ready :class:`RunRequest` (or its dict form).
            language: language name or alias (default ``python``).
            stdin: text fed to the program.
            files: files written to the workspace before the run.
            fetch_files: workspace files returned in ``result.files``.
            limits: limits of this run (default: the pool's, or the session's).
            timeout_s: shorthand for ``limits.timeout_s``.
            deadline_s: deadline of the whole call, queue wait and retries included.
            on_stdout / on_stderr: called with the program's output bytes as they are written
                (rules in :mod:`sandboxkit.streaming`); the result is the same without them. A
                pooled call retried after a passing fault streams the new attempt's output again.
                From ``SyncSandboxPool`` they run on the pool's private loop thread.
            timeout: the deprecated old name of ``timeout_s`` (a :class:`DeprecationWarning`).

        Returns:
            The result; ``result.status`` says how the program ended.

        Raises:
            InvalidRequest: the request is invalid or the backend does not support the language.
            BackendUnavailable: the backend cannot serve (SDK, engine, key, toolchain missing).
            SandboxCrashed: the sandbox died during the run.
            Transient: a passing fault persisted through every retry.
            DeadlineExceeded: the deadline passed.
            PoolClosed: the pool (or the session) is closed.
        """
        fields = {
            "language": language,
            "stdin": stdin,
            "files": dict(files) if files else None,
            "fetch_files": list(fetch_files) if fetch_files else None,
        }
        timeout_s = renamed(timeout_s, timeout, "timeout", where="run")
        request = make_request(code, fields, limits=limits or self.limits, timeout_s=timeout_s)
        self._core.check_language(request.language)
        if on_stdout is None and on_stderr is None:
            if self._workers is not None:
                return await self._workers.run(request, deadline_s)
            return await self._call(lambda sandbox: sandbox.run(request), deadline_s)
        check_callbacks(on_stdout, on_stderr, self._core.backend.name)
        streams = self._core.backend.capabilities.streaming
        return await self._call(
            lambda sandbox: run_streaming(sandbox, streams, request, on_stdout, on_stderr), deadline_s
        )

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float | None = None,
        deadline_s: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run a command (a ``bash -c`` string or an argv list): in a fresh-state sandbox from a pool, or in a session's.

        Args:
            command: a shell command line (run by ``bash -c``) or an argv list.
            cwd: working directory, relative to the workspace or, where the backend has
                ``capabilities.absolute_paths``, an absolute one (default: the workspace, or the
                session's ``cwd``).
            env: environment variables added for this command (over a session's ``env``).
            stdin: text fed to the command.
            timeout_s: this command's wall-clock limit (default: the sandbox's ``limits.timeout_s``).
            deadline_s: deadline of the whole call, as for :meth:`run`.
            on_stdout / on_stderr: as for :meth:`run` (see :mod:`sandboxkit.streaming`).
            timeout: the deprecated old name of ``timeout_s`` (a :class:`DeprecationWarning`).

        Returns:
            The result; ``result.status`` says how the command ended.

        Raises:
            Same as :meth:`run`; a ``cwd`` that escapes the workspace or is not a directory, or a
            ``timeout_s`` that is not positive, is an ``InvalidRequest``.
        """
        timeout_s = renamed(timeout_s, timeout, "timeout", where="exec")
        if timeout_s is not None:
            positive_timeout(timeout_s)
        cwd, env = self._exec_defaults(cwd, env)
        backend = self._core.backend
        if on_stdout is not None or on_stderr is not None:
            check_callbacks(on_stdout, on_stderr, backend.name)
        elif self._workers is not None:
            return await self._workers.exec(command, cwd, env, stdin, timeout_s, deadline_s)
        streams = backend.capabilities.streaming
        request = ExecRequest.of(command, cwd=cwd, env=env, stdin=stdin, timeout=timeout_s, backend=backend.name)
        return await self._call(
            lambda sandbox: exec_streaming(sandbox, streams, request, on_stdout, on_stderr), deadline_s
        )


def make_request(
    code: str | RunRequest | Mapping[str, Any], fields: Mapping[str, Any], *, limits: Limits, timeout_s: float | None
) -> RunRequest:
    """Build a validated :class:`RunRequest` from source code and the fields given, a dict or a request.

    ``fields`` (language, stdin, files, fetch_files) apply to source code only; a dict or a
    ready request carries its own. ``limits`` applies unless the request carries its own.

    Raises:
        InvalidRequest: a field is invalid (unknown language, ``..`` in a path, negative timeout).
    """
    try:
        if isinstance(code, RunRequest):
            req = code
        elif isinstance(code, Mapping):
            data = dict(code)
            data.setdefault("limits", limits)
            req = RunRequest.model_validate(data)
        else:
            data2: dict[str, Any] = {"code": code, "limits": limits}
            data2.update({key: value for key, value in fields.items() if value is not None})
            req = RunRequest.model_validate(data2)
        if timeout_s is not None:
            req = req.model_copy(update={"limits": req.limits.merged(timeout_s=positive_timeout(timeout_s))})
        return req
    except ValidationError as exc:
        raise InvalidRequest(validation_message(exc)) from exc


def positive_timeout(timeout_s: float) -> float:
    if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise InvalidRequest(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


def validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "request"
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg} (got {err.get('input')!r:.80})")
    return "invalid request: " + "; ".join(parts)
