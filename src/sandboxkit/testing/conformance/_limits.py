"""Limits, driven by what each backend declares in ``capabilities.limits``.

A backend that lists a :class:`~sandboxkit.models.Limits` field promises to enforce it; a
caller sizes its requests (and trusts its rewards) on that promise. Each test here runs only
when the field is declared, and then a program that breaks the limit must be stopped the way
the contract says. ``timeout_s`` (always enforced) is covered in the run semantics.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sandboxkit.base import Backend
from sandboxkit.models import Limits, RunResult, Status
from sandboxkit.output import cut_marker
from sandboxkit.testing.conformance._base import TIMEOUT_GRACE_S, ConformanceBase

_FORK_BOMB = """
import os, time
kids = []
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
print(len(kids))
for pid in kids:
    os.kill(pid, 9)
"""

_BIG_FILE = """
import os, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so the write fails with EFBIG instead of killing us
try:
    with open("big.bin", "wb") as f:
        for _ in range(3 * 16):
            f.write(b"x" * 65536)
except OSError:
    pass
print(os.path.getsize("big.bin"))
"""

_CONNECT = """
import socket
try:
    with socket.create_connection(({host!r}, {port}), timeout=3) as s:
        print("reached", s.recv(4).decode())
except OSError as exc:
    print("blocked", type(exc).__name__)
"""


def _host_address() -> str | None:
    """This machine's non-loopback address (no packet is sent), or ``None``."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        address: str = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


@contextmanager
def _pong_server(host: str) -> Iterator[int]:
    """A TCP server on ``host`` that answers every connection with ``pong``; yields its port."""
    server = socket.create_server((host, 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        server.close()


class LimitTests(ConformanceBase):
    """A declared limit is an enforced limit."""

    def require_limit(self, backend: Backend, field: str) -> None:
        if field not in backend.capabilities.limits:
            pytest.skip(f"backend does not declare {field!r} in capabilities.limits")

    async def run_alone(self, backend: Backend, code: str, limits: Limits) -> RunResult:
        """``code`` run in a sandbox of its own, opened with ``limits`` (a limit may be fixed at open)."""
        sb = await backend.open(limits)
        try:
            return await sb.run(self.request(code, limits=limits))
        finally:
            await sb.close()

    async def test_memory_limit_is_enforced(self, backend: Backend) -> None:
        self.require_limit(backend, "memory_mb")
        limits = Limits(timeout_s=20, memory_mb=64)
        result = await self.run_alone(backend, "x = b'x' * (512 << 20)\nprint(len(x))", limits)
        assert result.status is Status.MEMORY_EXCEEDED, result
        assert "536870912" not in result.stdout

    async def test_pids_limit_is_enforced(self, backend: Backend) -> None:
        self.require_limit(backend, "pids")
        # A fork bomb of 64 under pids=8 must stay far below 64; the margin (16) leaves room for
        # the backend's own helpers sharing the program's budget.
        limits = Limits(timeout_s=20, pids=8)
        result = await self.run_alone(backend, _FORK_BOMB, limits)
        assert result.stdout.strip().isdigit(), result
        assert int(result.stdout) < 16, f"the program held {result.stdout.strip()} children under pids=8"

    async def test_file_size_limit_is_enforced(self, backend: Backend) -> None:
        self.require_limit(backend, "file_size_mb")
        limits = Limits(timeout_s=20, file_size_mb=1)
        result = await self.run_alone(backend, _BIG_FILE, limits)
        assert result.stdout.strip().isdigit(), result
        assert int(result.stdout) <= 1 << 20, f"a {result.stdout.strip()}-byte file was written under file_size_mb=1"

    async def test_long_output_keeps_head_and_tail_and_the_program_runs_on(self, backend: Backend) -> None:
        self.require_limit(backend, "output_bytes")
        limits = Limits(timeout_s=20, output_bytes=10_000)
        code = "import sys\nsys.stdout.write('HEAD' + '.' * 200_000 + 'TAIL-END')\nsys.stdout.flush()\nsys.exit(3)"
        result = await self.run_alone(backend, code, limits)
        assert result.status is Status.FAILED and result.exit_code == 3, result
        assert result.stdout_truncated and not result.stderr_truncated
        assert result.stdout.startswith("HEAD") and result.stdout.endswith("TAIL-END")
        assert "sandboxkit:" in result.stdout and "bytes cut" in result.stdout
        assert len(result.stdout.encode()) <= 10_000 + len(cut_marker(10**9))

    async def test_output_flood_is_stopped_past_stop_bytes(self, backend: Backend) -> None:
        self.require_limit(backend, "output_bytes")
        limits = Limits(timeout_s=20, output_bytes=10_000, output_stop_bytes=1 << 20)
        sb = await backend.open(limits)
        started = time.monotonic()
        try:
            result = await sb.run(self.request("import sys\nwhile True: sys.stdout.write('x' * 4096)", limits=limits))
        finally:
            await sb.close()
        assert result.status is Status.OUTPUT_LIMIT, result
        assert result.stdout_truncated
        assert len(result.stdout.encode()) <= 10_000 + len(cut_marker(10**12))
        assert time.monotonic() - started < limits.timeout_s, "the flood ran until its timeout"

    async def test_network_off_cannot_reach_the_host(self, backend: Backend) -> None:
        self.require_limit(backend, "network")
        self.require_contained()
        if not backend.capabilities.network_control:
            pytest.skip("backend cannot turn the network off")
        host = _host_address()
        if host is None:
            pytest.skip("this machine has no non-loopback address to listen on")
        with _pong_server(host) as port:
            code = _CONNECT.format(host=host, port=port)
            on = Limits(timeout_s=20, network=True)
            control = await self.run_alone(backend, code, on)
            if not control.stdout.startswith("reached"):
                pytest.skip(f"even with network=True a sandbox cannot reach this host ({control.stdout.strip()!r})")
            off = Limits(timeout_s=20, network=False)
            result = await self.run_alone(backend, code, off)
        assert result.stdout.startswith("blocked"), f"network=False, yet the program got {result.stdout!r}"
        assert result.duration_s < off.timeout_s + TIMEOUT_GRACE_S
