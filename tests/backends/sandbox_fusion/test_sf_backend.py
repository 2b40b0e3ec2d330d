"""The ``sandbox_fusion`` backend against a real ``sandboxkit serve`` subprocess on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import sandboxkit
from sandboxkit.backends.sandbox_fusion import SandboxFusionBackend, split_url
from sandboxkit.errors import InvalidRequest, Transient
from sandboxkit.models import Limits, RunRequest, Status
from sandboxkit.pool import SandboxPool
from support.serve import ServeProcess

LIMITS = Limits(timeout_s=5, compile_timeout_s=30, output_bytes=64 * 1024)


@pytest.fixture
async def backend(sf_serve: ServeProcess) -> AsyncIterator[SandboxFusionBackend]:
    b = SandboxFusionBackend(url=sf_serve.url)
    try:
        yield b
    finally:
        await b.aclose()


def test_url_forms() -> None:
    assert split_url("http://h:8080") == ("http://h:8080", "http://h:8080/run_code")
    assert split_url("http://h:8080/") == ("http://h:8080", "http://h:8080/run_code")
    assert split_url("https://h/api/run_code/") == ("https://h/api", "https://h/api/run_code")
    with pytest.raises(InvalidRequest, match="http"):
        split_url("h:8080")


def test_url_from_environment_or_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_FUSION_URL", "http://10.0.0.1:9000/run_code")
    assert SandboxFusionBackend().base_url == "http://10.0.0.1:9000"
    assert sandboxkit.backend("sandbox_fusion").run_code_url == "http://10.0.0.1:9000/run_code"
    monkeypatch.delenv("SANDBOX_FUSION_URL")
    with pytest.raises(InvalidRequest, match="SANDBOX_FUSION_URL"):
        SandboxFusionBackend()
    assert not SandboxFusionBackend.availability().usable


@pytest.mark.parametrize("suffix", ["", "/", "/run_code", "/run_code/"])
async def test_base_or_full_run_code_url(sf_serve: ServeProcess, suffix: str) -> None:
    backend = SandboxFusionBackend(url=sf_serve.url + suffix)
    try:
        assert await backend.ping()
        sandbox = await backend.open(LIMITS)
        result = await sandbox.run(RunRequest(code="print('hi')", limits=LIMITS))
        assert result.status is Status.OK and result.stdout == "hi\n"
        assert result.backend == "sandbox_fusion" and result.sandbox_id == sandbox.id
    finally:
        await backend.aclose()


async def test_capabilities_say_stateless(backend: SandboxFusionBackend) -> None:
    caps = backend.capabilities
    assert caps.stateful is False and caps.resettable is True
    assert {"python", "cpp", "javascript", "java", "go", "rust", "bash"} <= caps.languages
    assert "c" not in caps.languages  # upstream Sandbox Fusion has no 'c'


async def test_run_statuses_map_back(backend: SandboxFusionBackend) -> None:
    sandbox = await backend.open(LIMITS)
    ok = await sandbox.run(RunRequest(code="print(input()[::-1])", stdin="abc", limits=LIMITS))
    failed = await sandbox.run(RunRequest(code="import sys; print('e', file=sys.stderr); sys.exit(4)", limits=LIMITS))
    slow = await sandbox.run(
        RunRequest(code="import time\nprint(1, flush=True)\ntime.sleep(9)", limits=LIMITS.merged(timeout_s=0.5))
    )
    ce = await sandbox.run(RunRequest(code="int main( {", language="cpp", limits=LIMITS))
    cpp = await sandbox.run(RunRequest(code='#include <cstdio>\nint main(){puts("c");}', language="cpp", limits=LIMITS))
    assert (ok.status, ok.stdout, ok.exit_code) == (Status.OK, "cba\n", 0)
    assert (failed.status, failed.exit_code, failed.stderr) == (Status.FAILED, 4, "e\n")
    assert slow.status is Status.TIMEOUT and slow.exit_code is None and slow.stdout == "1\n"
    assert ce.status is Status.COMPILE_ERROR and ce.compile is not None and "error" in ce.compile.stderr
    assert cpp.status is Status.OK and cpp.stdout == "c\n" and cpp.compile is not None and cpp.compile.ok


async def test_memory_and_output_limits(backend: SandboxFusionBackend) -> None:
    sandbox = await backend.open(LIMITS)
    hog = await sandbox.run(
        RunRequest(code="x = bytearray(600 * 1024 * 1024)\nprint('got it')", limits=LIMITS.merged(memory_mb=128))
    )
    flood = await sandbox.run(RunRequest(code="print('z' * 200_000 + 'END')", limits=LIMITS))
    assert hog.status in (Status.MEMORY_EXCEEDED, Status.FAILED) and "got it" not in hog.stdout
    # The service (cap 1 MiB) sent it all; the client keeps the head and the tail of its own cap.
    assert flood.status is Status.OK and flood.stdout_truncated
    assert flood.stdout.startswith("z" * 32 * 1024) and flood.stdout.endswith("z" * 100 + "END\n")
    assert f"[... sandboxkit: {200_004 - 64 * 1024} bytes cut ...]" in flood.stdout


async def test_long_stderr_keeps_the_traceback_at_its_end(backend: SandboxFusionBackend) -> None:
    sandbox = await backend.open(LIMITS)
    code = "import sys\nsys.stderr.write('e' * 300_000)\nraise ZeroDivisionError('late')"
    result = await sandbox.run(RunRequest(code=code, limits=LIMITS))
    assert result.status is Status.FAILED and result.stderr_truncated and not result.stdout_truncated
    assert result.stderr.startswith("e" * 1000)
    assert result.stderr.rstrip().endswith("ZeroDivisionError: late")
    assert len(result.stderr.encode()) < 64 * 1024 + 100


async def test_files_in_and_out_and_statelessness(backend: SandboxFusionBackend) -> None:
    sandbox = await backend.open(LIMITS)
    first = await sandbox.run(
        RunRequest(
            code="import os\nopen('made.txt','w').write(open('in/data.txt').read() * 2)",
            files={"in/data.txt": b"ab"},
            fetch_files=["made.txt", "absent.txt"],
            limits=LIMITS,
        )
    )
    assert first.files == {"made.txt": b"abab"}
    second = await sandbox.run(RunRequest(code="import os; print(os.path.exists('made.txt'))", limits=LIMITS))
    assert second.stdout == "False\n"  # stateless: each call is a fresh directory


async def test_staged_files_exec_and_reset(backend: SandboxFusionBackend) -> None:
    sandbox = await backend.open(LIMITS)
    await sandbox.write_files({"notes/a.txt": "alpha", "b.bin": b"\x00\x01"})
    assert await sandbox.read_files(["notes/a.txt", "b.bin", "nope"]) == {"notes/a.txt": b"alpha", "b.bin": b"\x00\x01"}
    shell = await sandbox.exec('cat notes/a.txt; echo " $GREETING"', env={"GREETING": "hi there"})
    argv = await sandbox.exec(["printf", "%s|", "a b", "c"], cwd="notes")
    piped = await sandbox.exec("tr a-z A-Z", stdin="shout")
    slow = await sandbox.exec("sleep 5", timeout=0.5)
    assert (shell.status, shell.stdout) == (Status.OK, "alpha hi there\n")
    assert argv.stdout == "a b|c|"
    assert piped.stdout == "SHOUT"
    assert slow.status is Status.TIMEOUT
    assert await sandbox.reset()
    assert await sandbox.read_files(["notes/a.txt"]) == {}
    with pytest.raises(InvalidRequest):
        await sandbox.write_files({"../x": "no"})
    with pytest.raises(InvalidRequest):
        await sandbox.exec("pwd", cwd="/etc")
    await sandbox.close()
    await sandbox.close()
    assert not await sandbox.alive()


async def test_what_sandbox_fusion_cannot_carry_is_refused(backend: SandboxFusionBackend) -> None:
    sandbox = await backend.open(LIMITS)
    with pytest.raises(InvalidRequest, match="env"):
        await sandbox.run(RunRequest(code="print(1)", env={"A": "1"}, limits=LIMITS))
    with pytest.raises(InvalidRequest, match="'c'"):
        await sandbox.run(RunRequest(code="int main(){}", language="c", limits=LIMITS))


async def test_the_service_rejecting_a_request_is_invalid_request_not_retried(backend: SandboxFusionBackend) -> None:
    with pytest.raises(InvalidRequest, match="422"):
        await backend.post_run_code({"code": "x", "language": "cobol"}, read_timeout=10, sandbox_id=None)


async def test_nobody_listening_is_transient() -> None:
    backend = SandboxFusionBackend(url="http://127.0.0.1:9")  # discard port: connection refused
    try:
        assert not await backend.ping()
        sandbox = await backend.open(LIMITS)
        with pytest.raises(Transient, match="cannot reach"):
            await sandbox.run(RunRequest(code="print(1)", limits=LIMITS))
    finally:
        await backend.aclose()


async def test_pool_run_many_through_the_server(sf_serve: ServeProcess) -> None:
    async with SandboxPool("sandbox_fusion", backend_options={"url": sf_serve.url}, max_concurrency=16) as pool:
        requests = [RunRequest(code=f"print({i} * 3)", limits=LIMITS) for i in range(40)]
        results = await pool.run_many(requests)
        metrics = pool.metrics()
    assert len(results) == 40
    assert [r.stdout for r in results] == [f"{i * 3}\n" for i in range(40)]  # type: ignore[union-attr]
    assert metrics["retries"] == 0
