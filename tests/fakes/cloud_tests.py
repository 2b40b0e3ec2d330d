"""Behaviour every cloud backend shows against its loopback fake, written once for Daytona and E2B.

``tests/backends/<service>/test_<service>_backend.py`` subclasses :class:`CloudBackendBehaviour`;
its ``conftest.py`` provides the fixtures ``fake`` (the running fake service), ``make_backend``
(a factory of backends pointed at the fake; closed after the test) and ``service_env`` (the
environment variables that point a child process at the fake). The real SDK does all the
talking, over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from sandboxkit import SandboxPool
from sandboxkit.base import Backend
from sandboxkit.errors import (
    BackendUnavailable,
    CapacityExceeded,
    InvalidRequest,
    RateLimited,
    SandboxCrashed,
    Transient,
)
from sandboxkit.models import Limits, RunRequest, RunResult, Status

from ._common import FakeService, interrupt_when_ready, wait_until

FAST_RETRY = {"backoff_base_s": 0.01, "backoff_max_s": 0.2}
SHORT = Limits(timeout_s=5.0, compile_timeout_s=60.0, output_bytes=64 * 1024)

MakeBackend = Callable[..., Backend]


def assert_bucket_respected(times: list[float], rate: float, burst: float, slack_s: float = 0.25) -> None:
    """No window of creations (as the service saw them) holds more than the token bucket allows."""
    times = sorted(times)
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            allowed = burst + rate * (times[j] - times[i] + slack_s)
            assert j - i + 1 <= allowed, f"creations {i}..{j} within {times[j] - times[i]:.3f}s exceed the bucket"


class CloudBackendBehaviour:
    """The traps of cloud sandboxes, each proven against the fake with the real SDK."""

    #: Environment variable holding the API key (the missing-key error must name it).
    key_env: ClassVar[str] = ""
    #: Registry name of the backend.
    backend_name: ClassVar[str] = ""

    # ------------------------------------------------------------------ running code

    async def test_streams_stdin_files_and_exit_codes(self, make_backend: MakeBackend) -> None:
        sb = await make_backend().open(SHORT)
        try:
            code = (
                "import sys\n"
                "for i in range(3):\n"
                "    print('out', i, flush=True); print('err', i, file=sys.stderr, flush=True)\n"
                "data = open('in/d.txt').read() + sys.stdin.read()\n"
                "open('out.txt', 'w').write(data)\n"
                "sys.exit(3)\n"
            )
            result = await sb.run(
                RunRequest(code=code, stdin="B", files={"in/d.txt": "A"}, fetch_files=["out.txt", "x"], limits=SHORT)
            )
            assert result.status is Status.FAILED  # a non-zero exit is a result, not an exception
            assert result.exit_code == 3
            assert result.stdout == "out 0\nout 1\nout 2\n"  # stdout and stderr kept apart
            assert result.stderr == "err 0\nerr 1\nerr 2\n"
            assert result.files == {"out.txt": b"AB"}
            assert result.backend == self.backend_name and result.sandbox_id == sb.id
        finally:
            await sb.close()

    async def test_compiled_language_and_compile_error(self, make_backend: MakeBackend) -> None:
        sb = await make_backend().open(SHORT)
        try:
            ok = await sb.run(
                RunRequest(
                    code='#include <stdio.h>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}',
                    language="c",
                    stdin="2 40",
                    limits=SHORT,
                )
            )
            assert ok.status is Status.OK and ok.stdout == "42\n", ok
            assert ok.compile is not None and ok.compile.ok
            bad = await sb.run(RunRequest(code="int main( {", language="c", limits=SHORT))
            assert bad.status is Status.COMPILE_ERROR
            assert bad.compile is not None and "error" in bad.compile.stderr
        finally:
            await sb.close()

    async def test_code_travels_through_the_file_api_never_the_command_line(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        sb = await make_backend().open(SHORT)
        try:
            marker = "UNIQUE_MARKER_31337"
            result = await sb.run(RunRequest(code=f"print('{marker}')", stdin=f"{marker}-stdin", limits=SHORT))
            assert result.stdout == f"{marker}\n"
            assert fake.commands, "the fake should have recorded the commands it ran"
            assert not [c for c in fake.commands if marker in c], "source or stdin was put on a command line"
        finally:
            await sb.close()

    async def test_timeout_kills_the_process_in_the_sandbox(self, fake: FakeService, make_backend: MakeBackend) -> None:
        # The SDKs' own timeouts stop waiting but leave the process running (the fakes do the
        # same); the wrapper's `timeout` kills the whole process group inside the sandbox.
        sb = await make_backend().open(SHORT)
        try:
            result = await sb.exec("sleep 30 & sleep 30; echo never", timeout=1)
            assert result.status is Status.TIMEOUT
            assert "never" not in result.stdout
            assert not sb.tainted  # type: ignore[attr-defined]  # ended inside the sandbox, not by the host
            assert wait_until(lambda: fake.running_processes(sb.id) == [], 3), "processes survived the timeout"
            assert (await sb.exec("echo still usable")).stdout == "still usable\n"
        finally:
            await sb.close()

    async def test_long_output_keeps_head_and_tail_and_a_flood_is_stopped(self, make_backend: MakeBackend) -> None:
        sb = await make_backend().open(SHORT)
        try:
            # 10 MB, then a traceback: the program runs to its end and its end is kept.
            code = "import sys\nsys.stdout.write('x' * 10_000_000)\nprint('END')\nraise ValueError('the end')"
            limits = Limits(timeout_s=20, output_bytes=5000)
            result = await sb.run(RunRequest(code=code, limits=limits))
            assert (result.status, result.exit_code) == (Status.FAILED, 1)
            assert result.stdout_truncated and not result.stderr_truncated
            assert result.stdout.startswith("x" * 2500) and result.stdout.endswith("x" * 2496 + "END\n")
            assert "[... sandboxkit: 9995004 bytes cut ...]" in result.stdout
            assert result.stderr.rstrip().endswith("ValueError: the end")
            flood = await sb.run(
                RunRequest(
                    code="while True: print('x' * 100)", limits=limits.merged(timeout_s=10, output_stop_bytes=300_000)
                )
            )
            assert flood.status is Status.OUTPUT_LIMIT and flood.stdout_truncated
            assert flood.duration_s < 8, "a flood must be stopped at stop_bytes, not run to its timeout"
        finally:
            await sb.close()

    @pytest.mark.parametrize(
        ("program", "stdout", "stderr"),
        [
            ("printf x", "x", ""),  # Daytona's labelled logs would say "x\n"
            (r"printf 'a\0b\n\0'; printf 'e\0' >&2", "a\0b\n\0", "e\0"),  # ...and drop the NULs
            (r"printf '\xff\xfe ok \xe2\x82'", b"\xff\xfe ok \xe2\x82".decode("utf-8", "replace"), ""),
        ],
    )
    async def test_output_is_byte_exact(
        self, make_backend: MakeBackend, program: str, stdout: str, stderr: str
    ) -> None:
        sb = await make_backend().open(SHORT)
        try:
            result = await sb.exec(program)
            assert (result.stdout, result.stderr, result.status) == (stdout, stderr, Status.OK)
            run = await sb.run(RunRequest(code="import sys; sys.stdout.buffer.write(b'x\\x00\\xff')", limits=SHORT))
            assert run.stdout == "x\x00\ufffd"
        finally:
            await sb.close()

    async def test_host_deadline_kills_and_taints_when_the_service_stops_answering(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        backend = make_backend(grace_s=1.0)
        sb = await backend.open(SHORT)
        try:
            fake.inject("exec", delay_s=4)  # the command ends, but the answer never comes in time
            result = await sb.exec("sleep 0.2; echo done", timeout=1)
            assert result.status is Status.TIMEOUT
            assert sb.tainted  # type: ignore[attr-defined]
            assert await sb.reset() is False, "a sandbox that stopped answering must not be reused"
            self.assert_command_was_killed(fake, sb.id)
            started = time.monotonic()
            assert (await sb.exec("echo next")).stdout == "next\n"  # not queued behind the stuck command
            assert time.monotonic() - started < 3
        finally:
            await sb.close()

    def assert_command_was_killed(self, fake: FakeService, sandbox_id: str) -> None:
        """Service-specific proof that the stuck command was killed (overridden per service)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ files

    async def test_files_round_trip_and_paths_stay_inside(self, make_backend: MakeBackend) -> None:
        sb = await make_backend().open(SHORT)
        try:
            await sb.write_files({"a/b.txt": "text", "bin.dat": b"\x00\xff"})
            assert await sb.read_files(["a/b.txt", "bin.dat", "missing"]) == {
                "a/b.txt": b"text",
                "bin.dat": b"\x00\xff",
            }
            for bad in ("../x", "/etc/../x", "/"):
                with pytest.raises(InvalidRequest):
                    await sb.write_files({bad: "x"})
            # Absolute paths go to the service's file API as they are (its own filesystem; the fake
            # keeps them below the sandbox's home), never to this host's.
            await sb.write_files({"/etc/sandboxkit-abs.txt": "abs"})
            assert await sb.read_files(["/etc/sandboxkit-abs.txt"]) == {"/etc/sandboxkit-abs.txt": b"abs"}
            assert not os.path.exists("/etc/sandboxkit-abs.txt")
            assert await sb.reset() is True
            assert await sb.read_files(["a/b.txt"]) == {}
        finally:
            await sb.close()

    # ------------------------------------------------------------------ creation

    async def test_created_with_labels_and_leak_backstops(self, fake: FakeService, make_backend: MakeBackend) -> None:
        backend = make_backend()
        sb = await backend.open(Limits(network=False))
        try:
            labels = fake.box(sb.id).labels
            assert labels["sandboxkit"] == "1"
            assert labels["sandboxkit-backend"] == backend.instance_id  # type: ignore[attr-defined]
            self.assert_backstops(fake.box(sb.id).data)
        finally:
            await sb.close()
        assert fake.live_count == 0

    def assert_backstops(self, create_body: dict[str, Any]) -> None:
        """Service-specific: network off and the auto-delete / lifetime settings were requested."""
        raise NotImplementedError

    async def test_429_on_create_is_rate_limited_and_the_pool_retries(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        backend = make_backend()
        fake.inject("create", status=429, retry_after=0.05)
        with pytest.raises(RateLimited) as info:
            await backend.open(SHORT)
        assert not isinstance(info.value, CapacityExceeded), "a plain 429 is about rate, not the account's limit"
        self.assert_retry_after(info.value)
        assert fake.ledger.rejected == {429: 1}, "the SDK must not retry behind the pool's back"
        fake.inject("create", status=429, times=2, retry_after=0.05)
        async with SandboxPool(backend, retries=3, limits=SHORT, **FAST_RETRY) as pool:
            result = await pool.run("print('after 429s')")
        assert result.stdout == "after 429s\n"
        assert fake.ledger.rejected == {429: 3}
        assert fake.live_count == 0

    def assert_retry_after(self, err: RateLimited) -> None:
        """Service-specific: whether the 429's Retry-After reaches the error."""

    async def test_the_services_concurrency_limit_is_capacity_exceeded_naming_the_limit(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        fake.quota = 2  # type: ignore[attr-defined]  # the account's limit, answered as the service answers it
        backend = make_backend()
        held = [await backend.open(SHORT) for _ in range(2)]
        try:
            with pytest.raises(CapacityExceeded) as info:
                await backend.open(SHORT)
            err = info.value
            assert isinstance(err, RateLimited) and err.retryable  # the pool may wait for it
            assert err.limit == 2 and err.backend == self.backend_name
            assert "max_sandboxes" in str(err) and fake.api_key not in str(err)
            assert sum(fake.ledger.rejected.values()) == 1, "the SDK must not retry behind the pool's back"
            assert fake.live_count == 2, "a refused create leaves nothing to reap"
        finally:
            for sb in held:
                await sb.close()
        assert (await backend.open(SHORT)).id  # room again once ours closed

    async def test_a_batch_larger_than_the_service_limit_waits_instead_of_failing(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        """Issue 19's must-show: 32 runs, max_concurrency=16, a service that allows 2 sandboxes at once."""
        fake.quota = 2  # type: ignore[attr-defined]
        async with SandboxPool(make_backend(), max_concurrency=16, limits=SHORT, deadline_s=240) as pool:
            results = await pool.run_many(
                [{"code": f"import time; time.sleep(0.1); print({i} * 2)"} for i in range(32)]
            )
            metrics = pool.metrics()
        errors = [r for r in results if not isinstance(r, RunResult)]
        assert not errors, errors[:3]  # none RateLimited, none lost
        assert [r.stdout for r in results if isinstance(r, RunResult)] == [f"{i * 2}\n" for i in range(32)]
        assert fake.ledger.peak_live <= 2
        assert metrics["capacity_refusals"] >= 1
        assert metrics["learned_cap"] is not None and 1 <= metrics["learned_cap"] < 16
        assert fake.live_count == 0

    async def test_5xx_on_create_is_transient_and_retried(self, fake: FakeService, make_backend: MakeBackend) -> None:
        backend = make_backend()
        fake.inject("create", status=500)
        with pytest.raises(Transient) as info:
            await backend.open(SHORT)
        assert not isinstance(info.value, RateLimited)
        fake.inject("create", status=502, times=2)
        async with SandboxPool(backend, retries=3, limits=SHORT, **FAST_RETRY) as pool:
            assert (await pool.run("print(1)")).status is Status.OK
        assert fake.live_count == 0

    async def test_unreachable_service_is_transient(self, make_backend: MakeBackend) -> None:
        import socket

        with socket.socket() as sock:  # a port nobody listens on
            sock.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(Transient):
            await make_backend(**self.pointed_at(dead), create_timeout_s=10).open(SHORT)

    def pointed_at(self, url: str) -> dict[str, str]:
        """Service-specific: options that point the backend at ``url``."""
        raise NotImplementedError

    async def test_bad_key_is_backend_unavailable(self, make_backend: MakeBackend) -> None:
        with pytest.raises(BackendUnavailable) as info:
            await make_backend(api_key="wrong-key").open(SHORT)
        assert "wrong-key" not in str(info.value)
        assert self.key_env in str(info.value)

    def test_missing_key_names_the_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from sandboxkit.registry import backend_class

        monkeypatch.delenv(self.key_env, raising=False)
        cls: Any = backend_class(self.backend_name)
        with pytest.raises(BackendUnavailable, match=self.key_env):
            cls()
        availability = cls.availability()
        assert not availability.usable and self.key_env in availability.reason
        monkeypatch.setenv(self.key_env, "from-env")
        assert cls.availability().usable

    async def test_key_never_in_reprs_errors_or_logs(
        self, fake: FakeService, make_backend: MakeBackend, caplog: pytest.LogCaptureFixture
    ) -> None:
        secret = fake.api_key
        caplog.set_level(logging.DEBUG)
        backend = make_backend()
        assert secret not in repr(backend) and secret not in str(vars(backend))
        async with SandboxPool(backend, limits=SHORT) as pool:
            assert (await pool.run("print(1)")).status is Status.OK
        errors: list[Exception] = []
        for status in (500, 429, 401):
            fake.inject("create", status=status, message=f"echoing {secret}?")
            try:
                await backend.open(SHORT)
            except Exception as exc:
                errors.append(exc)
        assert len(errors) == 3
        text = caplog.text + repr(errors) + " ".join(str(e) for e in errors) + repr(backend)
        assert "echoing" in text, "the service's message should still be shown"
        assert secret not in text

    async def test_create_that_times_out_leaves_no_sandbox(self, fake: FakeService, make_backend: MakeBackend) -> None:
        backend = make_backend(create_timeout_s=1.0)
        fake.inject("create", delay_s=4)  # the service creates it, but answers too late
        with pytest.raises(Transient, match="took longer"):
            await backend.open(SHORT)
        assert fake.ledger.created == 1
        assert fake.live_count == 0, "the sandbox created by the timed-out call was not deleted"

    # ------------------------------------------------------------------ vanished sandboxes

    async def test_sandbox_vanishing_mid_run_is_an_infra_error_then_a_fresh_sandbox(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        async with SandboxPool(make_backend(), max_sandboxes=1, retries=2, limits=SHORT, **FAST_RETRY) as pool:
            first = await pool.run("print('warm')")
            victim = first.sandbox_id
            assert victim is not None

            def vanish_when_running() -> None:
                wait_until(lambda: bool(fake.running_processes(victim)), 10)
                fake.vanish(victim)

            killer = threading.Thread(target=vanish_when_running)
            killer.start()
            with pytest.raises(SandboxCrashed):  # never a RunResult that would become a wrong reward
                await pool.run("import time; time.sleep(8); print('done')")
            killer.join()
            after = await pool.run("print('fresh')")
            assert after.status is Status.OK and after.stdout == "fresh\n"
            assert after.sandbox_id != victim
        assert fake.live_count == 0

    async def test_sandbox_vanished_while_idle_is_replaced_silently(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        async with SandboxPool(make_backend(), max_sandboxes=1, limits=SHORT) as pool:
            first = await pool.run("print(1)")
            assert first.sandbox_id is not None
            fake.vanish(first.sandbox_id)
            second = await pool.run("print(2)")  # the liveness check on lease catches it
            assert second.status is Status.OK and second.sandbox_id != first.sandbox_id
        assert fake.live_count == 0

    # ------------------------------------------------------------------ the pool's discipline

    async def test_hard_cap_and_creation_bucket_are_never_exceeded(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        cap, rate, burst, n = 3, 4.0, 2, 12
        # max_uses=1: every run needs a new sandbox, so creations are as dense as the pool allows.
        async with SandboxPool(
            make_backend(),
            max_concurrency=8,
            max_sandboxes=cap,
            creation_rate=rate,
            creation_burst=burst,
            max_uses=1,
            limits=SHORT,
        ) as pool:
            # The client's first request pays for its connection set-up, which would skew the arrival
            # times the fake records; warm it, then measure (the bucket holds over any window anyway).
            await pool.run("print('warm')")
            fake.ledger.create_times.clear()
            results = await pool.run_many([{"code": f"import time; time.sleep(0.6); print({i})"} for i in range(n)])
        assert [r.stdout for r in results if isinstance(r, RunResult)] == [f"{i}\n" for i in range(n)]
        assert fake.ledger.peak_live <= cap
        assert fake.ledger.peak_live >= 2, "the pool should run sandboxes concurrently"
        assert len(fake.ledger.create_times) == n
        assert_bucket_respected(fake.ledger.create_times, rate, burst)
        assert fake.live_count == 0

    async def test_quota_refusals_are_absorbed_without_wrong_results(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        fake.quota = 2  # type: ignore[attr-defined]  # the service allows 2 live sandboxes; the pool tries for 4
        async with SandboxPool(
            make_backend(),
            max_concurrency=4,
            max_sandboxes=4,
            max_uses=1,
            retries=40,
            limits=SHORT,
            backoff_base_s=0.02,
            backoff_max_s=0.3,
        ) as pool:
            results = await pool.run_many([{"code": "import time; time.sleep(0.2); print('ok')"}] * 6)
        assert all(isinstance(r, RunResult) and r.stdout == "ok\n" for r in results), results
        assert fake.ledger.peak_live <= 2
        assert sum(fake.ledger.rejected.values()) >= 1, "the service should have refused some creations"
        assert fake.live_count == 0

    def test_sigint_mid_batch_leaves_no_sandbox(self, fake: FakeService, service_env: dict[str, str]) -> None:
        script = textwrap.dedent(
            f"""
            import asyncio
            from sandboxkit import SandboxPool

            async def main():
                async with SandboxPool({self.backend_name!r}, max_concurrency=4, max_sandboxes=4) as pool:
                    await pool.run_many([{{"code": "import time; time.sleep(60)"}}] * 8)

            asyncio.run(main())
            """
        )

        def four_live() -> None:
            assert fake.live_count == 4

        interrupt_when_ready(
            script, {**os.environ, **service_env}, lambda: len(fake.running_processes()) >= 4, four_live
        )
        assert fake.live_count == 0, "sandboxes left behind after Ctrl-C"
        assert fake.running_processes() == []

    # ------------------------------------------------------------------ clean-up

    async def test_cleanup_deletes_every_labelled_sandbox_and_nothing_else(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        mine, other = make_backend(), make_backend()
        for b in (mine, mine, other):
            await b.open(SHORT)  # "leaked": never closed
        stranger = fake.new_box({"owner": "someone-else"})
        assert fake.live_count == 4
        assert await mine.cleanup() == 3
        assert fake.live_ids() == [stranger.id]
        fake.remove(stranger.id)

    def test_cli_cleanup(self, fake: FakeService, service_env: dict[str, str]) -> None:
        from typer.testing import CliRunner

        from sandboxkit.cli import app

        fake.new_box({"sandboxkit": "1"})
        fake.new_box({"sandboxkit": "1"})
        result = CliRunner().invoke(app, ["cleanup", "--backend", self.backend_name], env=service_env)
        assert result.exit_code == 0, result.output
        assert "removed 2" in result.output
        assert fake.live_count == 0

    async def test_emergency_cleanup_is_synchronous_and_deletes_what_it_holds(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        backend = make_backend()
        for _ in range(2):
            await backend.open(SHORT)
        assert fake.live_count == 2
        await asyncio.to_thread(backend.emergency_cleanup)  # no event loop in that thread
        assert fake.live_count == 0
