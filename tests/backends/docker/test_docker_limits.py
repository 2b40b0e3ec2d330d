"""Limits on a real engine: memory → ``memory_exceeded``, the pids limit holds, network none holds,
the file-size limit holds, and a run may tighten the limits its container was opened with."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits, RunRequest, Status
from sandboxkit.output import cut_head_tail
from support.docker_engine import FAST

MEMORY_HOG = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))"
C_MEMORY_HOG = (
    "#include <stdlib.h>\n#include <string.h>\n"
    "int main(void) { for (;;) { char *p = malloc(1 << 20); if (!p) return 3; memset(p, 1, 1 << 20); } }"
)


async def test_memory_limit_is_memory_exceeded(backend: Any) -> None:
    limits = FAST.merged(memory_mb=64)
    sandbox = await backend.open(limits)
    try:
        python = await sandbox.run(RunRequest(code=MEMORY_HOG, limits=limits))
        assert python.status is Status.MEMORY_EXCEEDED, python
        native = await sandbox.run(RunRequest(code=C_MEMORY_HOG, language="c", limits=limits))
        assert native.status is Status.MEMORY_EXCEEDED, native
        small = await sandbox.run(RunRequest(code="x = b'x' * (16 << 20)\nprint(len(x))", limits=limits))
        assert small.status is Status.OK and small.stdout == f"{16 << 20}\n"
        assert await sandbox.alive()
    finally:
        await sandbox.close()


async def test_a_run_can_tighten_the_memory_limit(sandbox: Any) -> None:
    ok = await sandbox.run(RunRequest(code="x = b'x' * (100 << 20)\nprint('fits')", limits=FAST))
    assert ok.stdout == "fits\n"
    tight = await sandbox.run(
        RunRequest(code="x = b'x' * (100 << 20)\nprint('fits')", limits=FAST.merged(memory_mb=48))
    )
    assert tight.status is Status.MEMORY_EXCEEDED, tight


async def test_pids_limit_holds(backend: Any) -> None:
    limits = FAST.merged(pids=16)
    sandbox = await backend.open(limits)
    try:
        code = (
            "import os, time\nkids = 0\n"
            "for _ in range(100):\n"
            "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    kids += 1\nprint(kids)"
        )
        result = await sandbox.run(RunRequest(code=code, limits=limits))
        assert result.status is Status.OK, result
        assert 0 < int(result.stdout) < 16  # the program itself counts against the limit
    finally:
        await sandbox.close()


def _gateway(docker_client: Any) -> str:
    config = docker_client.api.inspect_network("bridge")["IPAM"]["Config"]
    return str(config[0].get("Gateway", "172.17.0.1"))


CONNECT = (
    "import socket, sys\n"
    "try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n    print('connected')\n"
    "except OSError as exc:\n    print('blocked', type(exc).__name__)\n"
)


async def test_network_none_holds(sandbox: Any, docker_client: Any) -> None:
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    try:
        port = str(listener.getsockname()[1])
        for host in ("127.0.0.1", _gateway(docker_client)):
            result = await sandbox.run(RunRequest(code=CONNECT, argv=[host, port], limits=FAST))
            assert result.stdout.startswith("blocked"), (host, result)
        interfaces = await sandbox.exec("cat /proc/net/dev")
        assert [line.split(":")[0].strip() for line in interfaces.stdout.splitlines()[2:]] == ["lo"]
    finally:
        listener.close()


async def test_network_on_when_the_limits_allow_it(backend: Any, docker_client: Any) -> None:
    # The same connect succeeds when a sandbox is opened with network=True: the test above can fail.
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    limits = FAST.merged(network=True)
    sandbox = await backend.open(limits)
    try:
        port = str(listener.getsockname()[1])
        result = await sandbox.run(RunRequest(code=CONNECT, argv=[_gateway(docker_client), port], limits=limits))
        assert result.stdout == "connected\n", result
        with pytest.raises(InvalidRequest, match="network"):
            await sandbox.run(RunRequest(code="print(1)", limits=FAST))  # network off on a networked container
    finally:
        await sandbox.close()
        listener.close()


async def test_network_cannot_be_switched_on_per_run(sandbox: Any) -> None:
    with pytest.raises(InvalidRequest, match=r"network=True"):
        await sandbox.run(RunRequest(code="print(1)", limits=FAST.merged(network=True)))


async def test_file_size_limit_holds(sandbox: Any) -> None:
    code = "try:\n    open('big', 'wb').write(b'x' * (3 << 20))\n    print('wrote')\nexcept OSError as exc:\n    print(exc)"
    result = await sandbox.run(RunRequest(code=code, limits=FAST.merged(file_size_mb=1)))
    assert "File too large" in result.stdout, result


async def test_output_cap_applies_per_stream(sandbox: Any) -> None:
    # Past the cap a stream keeps its head and tail (cut marked) and the program runs on (issue 18).
    code = "import sys\nsys.stderr.write('e' * 2500 + 'E' * 2500)\nsys.stdout.write('o' * 50)"
    result = await sandbox.run(RunRequest(code=code, limits=FAST.merged(output_bytes=1000)))
    assert result.status is Status.OK and result.stderr_truncated and not result.stdout_truncated
    assert result.stderr == cut_head_tail(b"e" * 2500 + b"E" * 2500, 1000)[0].decode()
    assert result.stdout == "o" * 50


async def test_cpu_time_limit_backs_the_wall_timeout(sandbox: Any) -> None:
    result = await sandbox.run(RunRequest(code="while True:\n    pass", limits=Limits(timeout_s=1.0)))
    assert result.status is Status.TIMEOUT
    assert result.duration_s < 2.0
