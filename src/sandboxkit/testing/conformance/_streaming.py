"""Live output callbacks (``on_stdout`` / ``on_stderr``, :mod:`sandboxkit.streaming`).

Every backend takes the callbacks; the result is the same with or without them. A backend that
declares ``capabilities.streaming`` delivers chunks while the program runs (the early-arrival
test runs only there); one that does not delivers the final output once, after the end.
"""

from __future__ import annotations

import logging
import time

import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Status, decode_output
from sandboxkit.pool import SandboxPool
from sandboxkit.testing.conformance._base import ConformanceBase


class _Recorder:
    """Collects chunks with their arrival time (seconds since it was made)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.chunks: list[bytes] = []
        self.times: list[float] = []

    def __call__(self, data: bytes) -> None:
        assert isinstance(data, bytes) and data, f"a callback must get non-empty bytes, got {data!r}"
        self.chunks.append(data)
        self.times.append(time.perf_counter() - self.started)

    @property
    def text(self) -> str:
        return decode_output(b"".join(self.chunks))


class StreamingTests(ConformanceBase):
    """What ``on_stdout`` / ``on_stderr`` see, on every backend."""

    def _check_delivery(self, backend_or_sandbox: Backend | None, rec: _Recorder, kept: str) -> None:
        assert rec.text == kept, f"the callback saw {rec.text!r}, the result kept {kept!r}"
        if backend_or_sandbox is not None and not backend_or_sandbox.capabilities.streaming:
            assert len(rec.chunks) <= 1, "a backend that does not stream calls each callback once"

    async def test_stream_chunks_arrive_while_the_command_runs(self, backend: Backend, sandbox: Sandbox) -> None:
        if not backend.capabilities.streaming:
            pytest.skip(f"{backend.name} declares capabilities.streaming=False (output is given once, at the end)")
        await sandbox.exec("true")  # warm: the first command may start the sandbox's machinery
        out = _Recorder()
        result = await sandbox.exec("for i in 1 2 3; do echo line$i; sleep 1; done", on_stdout=out)
        ended = time.perf_counter() - out.started
        assert result.status is Status.OK, result
        assert out.text == result.stdout == "line1\nline2\nline3\n"
        assert len(out.chunks) >= 2, f"the three lines arrived in one chunk: {out.chunks!r}"
        assert out.times[0] < ended - 1.5, (
            f"the first line arrived {out.times[0]:.2f}s after the start, the command ended at {ended:.2f}s: "
            "it was not streamed"
        )

    async def test_stream_exec_both_streams_equal_the_result(self, backend: Backend, sandbox: Sandbox) -> None:
        out, err = _Recorder(), _Recorder()
        result = await sandbox.exec("echo out1; echo err1 >&2; echo out2; echo err2 >&2", on_stdout=out, on_stderr=err)
        assert result.status is Status.OK, result
        assert result.stdout == "out1\nout2\n" and result.stderr == "err1\nerr2\n"
        self._check_delivery(backend, out, result.stdout)
        self._check_delivery(backend, err, result.stderr)

    async def test_stream_run_gets_the_program_output(self, backend: Backend, sandbox: Sandbox) -> None:
        out, err = _Recorder(), _Recorder()
        code = "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nsys.exit(2)"
        result = await sandbox.run(self.request(code), on_stdout=out, on_stderr=err)
        assert result.status is Status.FAILED and result.exit_code == 2, result
        assert result.stdout == "to out\n" and result.stderr == "to err\n"
        self._check_delivery(backend, out, result.stdout)
        self._check_delivery(backend, err, result.stderr)

    async def test_stream_result_unchanged_by_callbacks(self, sandbox: Sandbox) -> None:
        cmd = "printf 'a%.0s' $(seq 1 5000); echo; echo done >&2; exit 4"
        plain = await sandbox.exec(cmd)
        watched = await sandbox.exec(cmd, on_stdout=_Recorder(), on_stderr=_Recorder())
        keys = ("status", "exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated")
        assert {k: getattr(watched, k) for k in keys} == {k: getattr(plain, k) for k in keys}

    async def test_stream_long_output_raw_chunks_before_the_cut(self, backend: Backend, sandbox: Sandbox) -> None:
        size = 3 * self.limits.output_bytes
        code = f"import sys\nsys.stdout.write('x' * {size - 4} + 'END\\n')"
        out = _Recorder()
        result = await sandbox.run(self.request(code), on_stdout=out)
        assert result.stdout_truncated, f"{size} bytes printed with output_bytes={self.limits.output_bytes}"
        if backend.capabilities.streaming:
            # The callbacks get everything written (up to stop_bytes), whatever the result keeps.
            assert out.text == "x" * (size - 4) + "END\n", (
                f"a streaming backend passes the raw bytes before the cut: got {len(out.text)} of {size}"
            )
        else:
            assert out.text == result.stdout, "the fallback delivers exactly the kept (cut) output"

    async def test_stream_callback_that_raises_loses_nothing(
        self, backend: Backend, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
    ) -> None:
        seen: list[bytes] = []

        def broken(data: bytes) -> None:
            seen.append(data)
            raise RuntimeError("a bug in the caller's callback")

        err = _Recorder()
        with caplog.at_level(logging.ERROR, logger="sandboxkit.streaming"):
            result = await sandbox.exec(
                "echo one; sleep 0.3; echo two; echo three >&2", on_stdout=broken, on_stderr=err
            )
        assert result.status is Status.OK, result
        assert result.stdout == "one\ntwo\n" and result.stderr == "three\n"
        assert decode_output(b"".join(seen)) == result.stdout, "later chunks still reach a callback that raised"
        assert err.text == "three\n", "the other stream's callback is unaffected"
        logged = [r for r in caplog.records if "on_stdout" in r.getMessage()]
        assert len(logged) == 1, [r.getMessage() for r in caplog.records]

    async def test_stream_through_pool_and_session(self, backend: Backend) -> None:
        async with SandboxPool(backend, max_concurrency=1, limits=self.limits) as pool:
            out, err = _Recorder(), _Recorder()
            result = await pool.exec("echo pooled; echo warn >&2", on_stdout=out, on_stderr=err)
            assert (out.text, err.text) == (result.stdout, result.stderr) == ("pooled\n", "warn\n")
            out = _Recorder()
            ran = await pool.run("print(6 * 7)", on_stdout=out)
            assert out.text == ran.stdout == "42\n"
            async with pool.session() as session:
                out = _Recorder()
                got = await session.exec("echo in-session", on_stdout=out)
                assert out.text == got.stdout == "in-session\n"
                out = _Recorder()
                got_run = await session.run("print('turn')", on_stdout=out)
                assert out.text == got_run.stdout == "turn\n"
            with pytest.raises(InvalidRequest, match="on_stdout must be a callable") as info:
                await pool.exec("echo x", on_stdout="print")  # type: ignore[arg-type]
            assert info.value.backend == backend.name
