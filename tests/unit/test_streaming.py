"""Streaming callbacks outside the per-backend conformance suite.

The fallback of a backend that cannot stream (the fake, a plugin written before streaming
existed), the safety wrapper around a user's callback, the ``stop_bytes`` bound on what a
callback gets, and the blocking pool's loop thread. The per-backend behaviour is in
``sandboxkit.testing.conformance._streaming``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sandboxkit import SandboxPool, SyncSandboxPool
from sandboxkit.base import Backend, Capabilities, Sandbox
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status
from sandboxkit.streaming import BufferedSandbox, Sink, replay, sink
from sandboxkit.testing import FakeBackend


class _NoFiles:
    """The file and life-cycle methods of a test sandbox that only runs."""

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        return None

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return {}

    async def alive(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class _OldSandbox(_NoFiles, Sandbox):
    """A plugin sandbox written before streaming: its run/exec take no callbacks."""

    backend_name = "old-plugin"

    def __init__(self) -> None:
        self.id = "old-1"

    async def run(self, request: RunRequest) -> RunResult:  # type: ignore[override]
        return RunResult(status=Status.OK, exit_code=0, stdout=f"ran {request.code}\n", stderr="warn\n")

    async def exec(  # type: ignore[override]
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        return ExecResult(status=Status.OK, exit_code=0, stdout=f"exec {command}\n")


class _OldBackend(Backend):
    name = "old-plugin"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python"}))

    async def open(self, limits: Limits | None = None) -> Sandbox:
        return _OldSandbox()


class _Recording(_NoFiles, BufferedSandbox):
    """A non-streaming sandbox that records the callbacks its run/exec were given."""

    backend_name = "recording"

    def __init__(self) -> None:
        self.id = "rec-1"
        self.given: list[tuple[object, object]] = []

    async def run(self, request: RunRequest, **callbacks: Any) -> RunResult:
        self.given.append((callbacks.get("on_stdout"), callbacks.get("on_stderr")))
        return await super().run(request, **callbacks)

    async def exec(self, command: str | Sequence[str], **kw: Any) -> ExecResult:
        self.given.append((kw.get("on_stdout"), kw.get("on_stderr")))
        return await super().exec(command, **kw)

    async def _run_buffered(self, request: RunRequest) -> RunResult:
        return RunResult(status=Status.OK, exit_code=0, stdout="ran\n")

    async def _exec_buffered(self, command: str | Sequence[str], **kw: Any) -> ExecResult:
        return ExecResult(status=Status.OK, exit_code=0, stdout="done\n")


class _RecordingBackend(_OldBackend):
    name = "recording"

    def __init__(self) -> None:
        self.sandbox = _Recording()

    async def open(self, limits: Limits | None = None) -> Sandbox:
        return self.sandbox


async def test_a_buffered_sandbox_replays_the_callbacks_itself_the_pool_does_not_again() -> None:
    """One replay per call: the pool hands the callbacks to a ``BufferedSandbox``, which replays them."""
    backend = _RecordingBackend()
    out: list[bytes] = []
    async with SandboxPool(backend, max_concurrency=1) as pool:
        await pool.run("x", on_stdout=out.append)
        await pool.exec("ls", on_stdout=out.append)
        await pool.exec("ls")
    assert out == [b"ran\n", b"done\n"]
    assert backend.sandbox.given == [(out.append, None), (out.append, None), (None, None)]


async def test_fake_backend_replays_the_final_output_once() -> None:
    backend = FakeBackend()
    assert backend.capabilities.streaming is False
    chunks: list[bytes] = []
    async with SandboxPool(backend, max_concurrency=1) as pool:
        result = await pool.run("hello", on_stdout=chunks.append)
        assert chunks == [b"hello"] and result.stdout == "hello"
        chunks.clear()
        async with pool.session() as session:
            got = await session.exec("echo-me", on_stdout=chunks.append, on_stderr=chunks.append)
        assert chunks == [b"echo-me"] and got.stdout == "echo-me", "an empty stderr is not delivered"


async def test_plugin_without_callback_parameters_still_works_through_the_pool() -> None:
    out: list[bytes] = []
    err: list[bytes] = []
    async with SandboxPool(_OldBackend(), max_concurrency=1) as pool:
        ran = await pool.run("x", on_stdout=out.append, on_stderr=err.append)
        assert (out, err) == ([b"ran x\n"], [b"warn\n"])
        assert ran.stdout == "ran x\n"
        out.clear()
        await pool.exec("ls", on_stdout=out.append)
        assert out == [b"exec ls\n"]
        plain = await pool.exec("ls")  # no callbacks: called exactly as before streaming existed
        assert plain.stdout == "exec ls\n"


def test_sink_logs_a_failing_callback_once_and_keeps_calling(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[bytes] = []

    def broken(data: bytes) -> None:
        calls.append(data)
        raise ValueError("user bug")

    wrapped = sink(broken, "on_stdout")
    assert isinstance(wrapped, Sink)
    with caplog.at_level(logging.ERROR, logger="sandboxkit.streaming"):
        for chunk in (b"a", b"", b"b", b"c"):
            wrapped(chunk)
    assert calls == [b"a", b"b", b"c"], "empty chunks are skipped, later chunks still delivered"
    assert wrapped.failures == 3 and wrapped.delivered == 3
    assert len(caplog.records) == 1 and "on_stdout" in caplog.records[0].getMessage()
    assert sink(wrapped, "on_stdout") is wrapped and sink(None, "on_stdout") is None


def test_sink_refuses_a_non_callable_with_the_value() -> None:
    with pytest.raises(InvalidRequest, match=r"on_stderr must be a callable taking bytes.*got 42") as info:
        sink(42, "on_stderr", backend="docker")  # type: ignore[arg-type]
    assert info.value.backend == "docker"


def test_replay_encodes_text_and_skips_empty_streams() -> None:
    out: list[bytes] = []
    err: list[bytes] = []
    result = ExecResult(status=Status.OK, stdout="héllo\n", stderr="")
    assert replay(result, out.append, err.append) is result
    assert out == ["héllo\n".encode()] and err == []


async def test_subprocess_callbacks_stop_at_stop_bytes() -> None:
    limits = Limits(timeout_s=20, output_bytes=1000, output_stop_bytes=100_000)
    out: list[bytes] = []
    async with SandboxPool("subprocess", max_concurrency=1, limits=limits) as pool:
        result = await pool.run("import sys\nwhile True: sys.stdout.write('y' * 65536)", on_stdout=out.append)
    assert result.status is Status.OUTPUT_LIMIT
    assert sum(map(len, out)) == 100_000, "a callback gets the raw output up to stop_bytes, not beyond"
    assert len(result.stdout) < 2000 and result.stdout_truncated


def test_sync_pool_callbacks_run_on_the_pool_loop_thread() -> None:
    threads: set[int] = set()
    out: list[bytes] = []

    def record(data: bytes) -> None:
        threads.add(threading.get_ident())
        out.append(data)

    with SyncSandboxPool("subprocess", max_concurrency=1) as pool:
        result = pool.exec("echo a; echo b", on_stdout=record)
        with pool.session() as session:
            session.run("print('c')", on_stdout=record)
    assert result.stdout == "a\nb\n"
    assert b"".join(out) == b"a\nb\nc\n"
    assert threads and threading.get_ident() not in threads, "callbacks run on the pool's private loop thread"


async def test_a_buffered_sandbox_refuses_a_non_callable_callback_before_the_program_runs() -> None:
    """The callbacks are checked where every backend takes them (``CallbackSandbox``), not after the run."""
    backend = FakeBackend()
    sandbox = await backend.open()
    with pytest.raises(InvalidRequest, match="on_stdout must be a callable"):
        await sandbox.run(RunRequest(code="ran-anyway"), on_stdout=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="on_stderr must be a callable"):
        await sandbox.exec("ran-anyway", on_stderr="not a function")  # type: ignore[arg-type]
    assert backend.attempts == {}, "nothing ran"


def test_every_built_in_sandbox_takes_the_callbacks_through_one_class() -> None:
    """``run``/``exec_request`` and their keyword list are written once (``CallbackSandbox``), not per backend."""
    from sandboxkit.backends._cloud_sandbox import CloudSandbox
    from sandboxkit.backends.docker import DockerSandbox
    from sandboxkit.backends.sandbox_fusion import SandboxFusionSandbox
    from sandboxkit.backends.subprocess import SubprocessSandbox
    from sandboxkit.streaming import CallbackSandbox
    from sandboxkit.testing.fake import FakeSandbox

    for cls in (DockerSandbox, SubprocessSandbox, CloudSandbox, SandboxFusionSandbox, FakeSandbox):
        assert issubclass(cls, CallbackSandbox), cls
        assert [name for name in ("run", "exec_request") if name in vars(cls)] == [], cls


async def test_an_empty_command_is_refused_before_a_sandbox_is_taken() -> None:
    """The pool checks ``exec``'s arguments once (one ``ExecRequest``), before it leases a sandbox for them."""
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=1) as pool:
        with pytest.raises(InvalidRequest, match="non-empty command"):
            await pool.exec([], on_stdout=lambda chunk: None)
        assert backend.opens_attempted == 0
        async with pool.session() as session:
            opened = backend.opens_attempted
            with pytest.raises(InvalidRequest, match="non-empty command"):
                await session.exec([])
            assert backend.opens_attempted == opened
    assert backend.opens_attempted == 1, "only the session's sandbox was opened"
