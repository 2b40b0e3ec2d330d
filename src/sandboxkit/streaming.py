"""Live output callbacks (``on_stdout`` / ``on_stderr``) for long commands.

A long command (a test suite, a training script an agent started) is opaque until it ends
unless its output can be watched as it is written. ``exec`` and ``run`` take two optional
callbacks that receive the program's raw output bytes as they arrive; the returned result is
the same as without them (the same head + tail text and ``*_truncated`` flags), so streaming is
purely an observation and can never change a reward.

Why plain callbacks rather than an async iterator: a backend's read loop calls them directly
(no queue, no extra task, no back-pressure to get wrong), they work unchanged from the
blocking ``SyncSandboxPool``, and an iterator is a few lines on top when a caller wants one.

Rules every backend follows (pinned by the conformance suite):

* A callback is called on the event loop (keep it quick: a slow one delays every other call's
  I/O on that loop; hand the bytes to a queue for heavy work), with non-empty ``bytes`` chunks
  in the order they were written, up to ``limits.stop_bytes()`` per stream (the raw bytes, before the head +
  tail cut; a chunk may end inside a multi-byte character).
* A callback that raises is logged once and keeps being called; the result keeps everything
  (a user's callback bug must not lose the result of a training step).
* A backend that cannot stream (``Capabilities.streaming`` is False) calls each callback
  once, after the command ends, with the final (cut) output, so callers need no special case.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import TypeVar

from sandboxkit.base import OutputCallback, Sandbox
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import ExecRequest, ExecResult, RunRequest, RunResult

__all__ = [
    "BufferedSandbox",
    "CallbackSandbox",
    "OutputCallback",
    "Sink",
    "Sinks",
    "check_callbacks",
    "exec_streaming",
    "replay",
    "run_streaming",
    "sink",
]

logger = logging.getLogger("sandboxkit.streaming")

R = TypeVar("R", bound=ExecResult)


class Sink:
    """A user's output callback made safe to call from a backend's read loop.

    Attributes:
        delivered: bytes handed to the callback so far.
        failures: how many calls raised (the first is logged with its traceback).
    """

    __slots__ = ("_fn", "_what", "delivered", "failures")

    def __init__(self, fn: OutputCallback, what: str) -> None:
        self._fn = fn
        self._what = what
        self.delivered = 0
        self.failures = 0

    def __call__(self, data: bytes) -> None:
        """Hand ``data`` to the callback; never raises (a failing callback is logged)."""
        if not data:
            return
        self.delivered += len(data)
        try:
            self._fn(data)
        except Exception:
            self.failures += 1
            if self.failures == 1:
                logger.exception(
                    "the %s callback %r raised; the output is still kept in the result and later chunks are "
                    "still passed to it (fix the callback)",
                    self._what,
                    self._fn,
                )


def sink(fn: OutputCallback | None, what: str, *, backend: str | None = None) -> Sink | None:
    """Wrap a callback (``None`` stays ``None``; a :class:`Sink` is returned as is).

    Raises:
        InvalidRequest: ``fn`` is not callable.
    """
    if fn is None or isinstance(fn, Sink):
        return fn
    if not callable(fn):
        raise InvalidRequest(
            f"{what} must be a callable taking bytes (or None), got {fn!r}; pass e.g. sys.stdout.buffer.write",
            backend=backend,
        )
    return Sink(fn, what)


def check_callbacks(on_stdout: OutputCallback | None, on_stderr: OutputCallback | None, backend: str) -> None:
    """Reject a non-callable callback before anything runs.

    Raises:
        InvalidRequest: a callback is not callable.
    """
    sink(on_stdout, "on_stdout", backend=backend)
    sink(on_stderr, "on_stderr", backend=backend)


def replay(result: R, on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> R:
    """Give a finished result's output to the callbacks, once each (the non-streaming fallback).

    The callbacks get the result's text (head + cut marker + tail when it was cut) encoded as
    UTF-8; an empty stream is not delivered. Returns ``result`` unchanged.
    """
    for fn, text, what in ((on_stdout, result.stdout, "on_stdout"), (on_stderr, result.stderr, "on_stderr")):
        wrapped = sink(fn, what)
        if wrapped is not None and text:
            wrapped(text.encode("utf-8", "replace"))
    return result


async def exec_streaming(
    sandbox: Sandbox,
    streams: bool,
    request: ExecRequest,
    on_stdout: OutputCallback | None = None,
    on_stderr: OutputCallback | None = None,
) -> ExecResult:
    """``sandbox.exec`` of a request checked once by the caller, with callbacks, for the pool and sessions.

    The callbacks are passed to the sandbox when it takes them (:func:`_takes_callbacks`); otherwise
    they are replayed here after the command, so a plugin backend written before streaming existed
    (whose ``exec`` takes no callbacks) keeps working.
    """
    if on_stdout is None and on_stderr is None:
        return await _exec(sandbox, request)
    if _takes_callbacks(sandbox, streams):
        return await _exec(sandbox, request, {"on_stdout": on_stdout, "on_stderr": on_stderr})
    return replay(await _exec(sandbox, request), on_stdout, on_stderr)


async def _exec(
    sandbox: Sandbox, request: ExecRequest, callbacks: Mapping[str, OutputCallback | None] | None = None
) -> ExecResult:
    """``request`` run by ``sandbox``: handed to ``exec_request`` as it is, unless the sandbox overrides
    ``exec`` itself (a plugin's keyword form, which then gets the request's fields as keywords).

    ``callbacks`` are passed only when given, so a keyword-form ``exec`` without them keeps working.
    """
    if type(sandbox).exec is Sandbox.exec:  # the base's exec would only check and bundle the request again
        return await sandbox.exec_request(request, **(callbacks or {}))
    return await sandbox.exec(
        request.command,
        cwd=request.cwd,
        env=request.env,
        stdin=request.stdin,
        timeout=request.timeout_s,
        **(callbacks or {}),
    )


async def run_streaming(
    sandbox: Sandbox,
    streams: bool,
    request: RunRequest,
    on_stdout: OutputCallback | None = None,
    on_stderr: OutputCallback | None = None,
) -> RunResult:
    """``sandbox.run`` with callbacks, for the pool and sessions (see :func:`exec_streaming`)."""
    if on_stdout is None and on_stderr is None:
        return await sandbox.run(request)
    if _takes_callbacks(sandbox, streams):
        return await sandbox.run(request, on_stdout=on_stdout, on_stderr=on_stderr)
    return replay(await sandbox.run(request), on_stdout, on_stderr)


def _takes_callbacks(sandbox: Sandbox, streams: bool) -> bool:
    """Whether ``sandbox``'s run and exec take the callbacks: a streaming backend's do, and so does any
    :class:`CallbackSandbox` (a :class:`BufferedSandbox` replays them itself: replaying here too would
    be a second, empty pass). Only a plugin written before streaming existed does not."""
    return streams or isinstance(sandbox, CallbackSandbox)


#: The two callbacks made safe: stdout's and stderr's, ``None`` where the caller gave none.
Sinks = tuple[Sink | None, Sink | None]


class CallbackSandbox(Sandbox):
    """A sandbox whose ``run`` and ``exec`` take the callbacks: the contract's signatures, written once.

    Every built-in backend derives from it. The callbacks are checked and wrapped (:class:`Sink`)
    here, before anything runs, so a backend implements :meth:`_run_to` and :meth:`_exec_to` with
    the two sinks and never repeats the keyword list or the check. A streaming backend hands the
    sinks to its read loop; :class:`BufferedSandbox` replays the final output to them.
    """

    async def run(
        self,
        request: RunRequest,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> RunResult:
        """See :meth:`Sandbox.run`; the callbacks are refused before anything runs if not callable."""
        return await self._run_to(request, self._sinks(on_stdout, on_stderr))

    async def exec_request(
        self,
        request: ExecRequest,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecResult:
        """See :meth:`Sandbox.exec`; the callbacks are refused before anything runs if not callable."""
        return await self._exec_to(request, self._sinks(on_stdout, on_stderr))

    def _sinks(self, on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> Sinks:
        backend = self.backend_name
        return sink(on_stdout, "on_stdout", backend=backend), sink(on_stderr, "on_stderr", backend=backend)

    @abc.abstractmethod
    async def _run_to(self, request: RunRequest, sinks: Sinks) -> RunResult:
        """:meth:`Sandbox.run`, with the program's output also going to ``sinks`` (it raises what that documents)."""

    @abc.abstractmethod
    async def _exec_to(self, request: ExecRequest, sinks: Sinks) -> ExecResult:
        """:meth:`Sandbox.exec_request`, with the output also going to ``sinks`` (it raises what that documents)."""


class BufferedSandbox(CallbackSandbox):
    """A sandbox whose backend cannot stream: ``run``/``exec`` replay the final output to the callbacks.

    Written once here so every non-streaming backend (the cloud wrapper, Sandbox Fusion, Ray
    placement, the testing fake) keeps the same contract: implement :meth:`_run_buffered` and
    :meth:`_exec_buffered` (the :class:`~sandboxkit.base.Sandbox` semantics without callbacks),
    and each callback is called once, after the command ends, with the final (cut) output.
    """

    async def _run_to(self, request: RunRequest, sinks: Sinks) -> RunResult:
        return replay(await self._run_buffered(request), *sinks)

    async def _exec_to(self, request: ExecRequest, sinks: Sinks) -> ExecResult:
        return replay(await self._exec_buffered(request), *sinks)

    @abc.abstractmethod
    async def _run_buffered(self, request: RunRequest) -> RunResult:
        """:meth:`Sandbox.run` without callbacks."""

    @abc.abstractmethod
    async def _exec_buffered(self, request: ExecRequest) -> ExecResult:
        """:meth:`Sandbox.exec_request` without callbacks."""
