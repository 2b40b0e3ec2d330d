"""Hostile programs (the list of issue 3) against the Docker backend.

Each case runs through a real :class:`SandboxPool` on a real engine and must be contained:
the right status, the run's own duration within its timeout + 1 s, the pool still serving
afterwards, and nothing left running in any container (``docker top`` shows only the runner).
The fixture's teardown then checks that no container or volume of the test is left.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from sandboxkit.models import Limits, RunResult, Status
from sandboxkit.pool import SandboxPool
from support.docker_engine import FAST, containers_of, processes

HOSTILE = FAST.merged(timeout_s=2.0)


@pytest.fixture
async def pool(backend: Any) -> AsyncIterator[SandboxPool]:
    async with SandboxPool(backend, max_concurrency=2, limits=HOSTILE) as p:
        yield p


async def contained(pool: SandboxPool, docker_client: Any, labels: dict[str, str], code: str, **kw: Any) -> RunResult:
    """Run ``code``; check the run ended within its limit and the pool and containers are clean after."""
    started = time.monotonic()
    result = await pool.run(code, **kw)
    limits: Limits = kw.get("limits") or HOSTILE
    assert result.duration_s < limits.timeout_s + 1, result
    assert time.monotonic() - started < limits.timeout_s + 10
    after = await pool.run("print('still serving')")
    assert after.status is Status.OK and after.stdout == "still serving\n", after
    for container_id in containers_of(docker_client, labels):
        procs = processes(docker_client, container_id)
        assert len(procs) == 1, f"processes left in {container_id[:12]}: {procs}"
    assert docker_client.ping()
    return result


async def test_infinite_loop(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    result = await contained(pool, docker_client, test_labels, "while True:\n    pass")
    assert result.status is Status.TIMEOUT


async def test_long_sleep(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    result = await contained(pool, docker_client, test_labels, "import time\ntime.sleep(3600)")
    assert result.status is Status.TIMEOUT


async def test_fork_bomb(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = await contained(pool, docker_client, test_labels, code)
    assert result.status is Status.TIMEOUT


async def test_shell_fork_bomb(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    result = await contained(pool, docker_client, test_labels, ":(){ :|:& };:\nsleep 5", language="bash")
    assert result.status in (Status.TIMEOUT, Status.FAILED)


async def test_memory_bomb(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))"
    # A generous timeout: on a loaded host the kernel's reclaim before the OOM kill can take seconds.
    result = await contained(pool, docker_client, test_labels, code, limits=HOSTILE.merged(timeout_s=10))
    assert result.status is Status.MEMORY_EXCEEDED, result


async def test_hundred_megabytes_of_stdout(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    code = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))"
    result = await contained(pool, docker_client, test_labels, code)
    assert result.status is Status.OUTPUT_LIMIT  # past Limits.stop_bytes() (64 MiB): stopped
    assert result.stdout_truncated
    head, marker, tail = result.stdout.partition(" bytes cut ...]\n")
    assert marker and head.startswith("x") and tail == "x" * (HOSTILE.output_bytes // 2)
    assert len(head) < HOSTILE.output_bytes


async def test_non_utf8_stdout(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    code = "import sys\nsys.stdout.buffer.write(b'ok' + bytes(range(128, 256)) + b'end')"
    result = await contained(pool, docker_client, test_labels, code)
    assert result.status is Status.OK
    assert result.stdout.startswith("ok") and result.stdout.endswith("end") and "\ufffd" in result.stdout


async def test_parent_environment_is_invisible(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOXKIT_TEST_API_KEY", "sk-very-secret")
    code = "import os\nprint(sorted(os.environ))\nprint(os.environ.get('SANDBOXKIT_TEST_API_KEY', 'absent'))"
    result = await contained(pool, docker_client, test_labels, code)
    names, value = result.stdout.splitlines()
    assert value == "absent"
    assert set(eval(names)) <= {"PATH", "HOME", "LANG"}


async def test_root_only_files_are_unreadable(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str], tmp_path: Any
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host credential")
    secret.chmod(0o600)
    code = (
        "import os\n"
        f"for path in ['/etc/shadow', '/root/.bashrc', '/proc/1/environ', '/proc/1/mem', {str(secret)!r}]:\n"
        "    try:\n        open(path, 'rb').read(16)\n        print('READ', path)\n"
        "    except OSError as exc:\n        print('denied', path, type(exc).__name__)\n"
    )
    result = await contained(pool, docker_client, test_labels, code)
    assert "READ" not in result.stdout, result.stdout
    assert result.stdout.count("denied") == 5


async def test_writing_outside_the_workspace_fails(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]
) -> None:
    code = (
        "for path in ['/etc/evil', '/usr/bin/evil', '/home/sandbox/evil', '/evil', '/proc/sys/kernel/hostname',"
        " '/sys/fs/cgroup/memory/memory.limit_in_bytes']:\n"
        "    try:\n        open(path, 'w').write('x')\n        print('WROTE', path)\n"
        "    except OSError as exc:\n        print('denied', path)\n"
        "open('/tmp/private-scratch', 'w').write('ok')\nopen('inside.txt', 'w').write('ok')\nprint('workspace ok')\n"
    )
    result = await contained(pool, docker_client, test_labels, code)
    assert "WROTE" not in result.stdout, result.stdout
    assert result.stdout.count("denied") == 6 and "workspace ok" in result.stdout


async def test_another_runs_files_are_invisible(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]
) -> None:
    async with pool.session() as holder:  # keeps its sandbox (and its files) while the other run goes on
        await holder.run("open('secret-a.txt', 'w').write('A'); open('/tmp/secret-a', 'w').write('A')")
        code = (
            "import os\nfound = []\nfor top in ['/work', '/tmp', '/dev/shm', '/home']:\n"
            "    for root, dirs, files in os.walk(top):\n        found += [f for f in files if 'secret' in f]\n"
            "print(found)"
        )
        result = await contained(pool, docker_client, test_labels, code)
        assert result.stdout == "[]\n"
    reused = await pool.run("import os\nprint(os.listdir('.'), os.listdir('/tmp'))")  # after reset
    assert "secret" not in reused.stdout


async def test_host_tcp_ports_are_unreachable(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]
) -> None:
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    port = listener.getsockname()[1]
    gateway = docker_client.api.inspect_network("bridge")["IPAM"]["Config"][0].get("Gateway", "172.17.0.1")
    try:
        code = (
            "import socket\n"
            f"for host in ['127.0.0.1', {gateway!r}, 'host.docker.internal']:\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), timeout=1).close()\n"
            "        print('CONNECTED', host)\n"
            "    except OSError as exc:\n        print('blocked', host)\n"
        )
        result = await contained(pool, docker_client, test_labels, code)
    finally:
        listener.close()
    assert "CONNECTED" not in result.stdout, result.stdout
    assert result.stdout.count("blocked") == 3


async def test_daemon_does_not_outlive_its_run(backend: Any, docker_client: Any) -> None:
    sandbox = await backend.open(HOSTILE)
    try:
        code = (
            "import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        while True:\n            open('tick', 'a').write('.')\n            time.sleep(0.02)\n"
            "    os._exit(0)\n"
            "time.sleep(0.3)\nprint('parent done')"
        )
        from sandboxkit.models import RunRequest

        result = await sandbox.run(RunRequest(code=code, limits=HOSTILE))
        assert result.status is Status.OK and result.stdout == "parent done\n"
        assert len(processes(docker_client, sandbox.container_id)) == 1
        ticks = (await sandbox.read_files(["tick"]))["tick"]
        await anyio.sleep(0.3)
        assert (await sandbox.read_files(["tick"]))["tick"] == ticks, "the daemon kept running"
        assert await sandbox.alive()
    finally:
        await sandbox.close()


async def test_killing_the_parent_and_everyone(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]
) -> None:
    code = (
        "import os, signal\n"
        "for pid in (os.getppid(), 1):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n        print('sent', pid)\n"
        "    except OSError as exc:\n        print('refused', pid)\n"
        "print('still here')\n"
    )
    result = await contained(pool, docker_client, test_labels, code)
    assert result.status is Status.OK and "still here" in result.stdout
    # kill(-1) reaches every process the program may signal; init (the runner) is exempt.
    everyone = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nprint('alive')"
    assert (await contained(pool, docker_client, test_labels, everyone)).stdout == "alive\n"


async def test_forging_runner_replies_is_impossible(
    pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]
) -> None:
    # The runner's stdout is the channel to the host; a program that could write to it could fake results.
    code = (
        "import os\nfor path in ['/proc/1/fd/1', '/proc/1/fd/0']:\n"
        "    try:\n        fd = os.open(path, os.O_WRONLY)\n        os.write(fd, b'\\0\\0\\0\\x02{}')\n"
        "        print('OPENED', path)\n"
        "    except OSError:\n        print('denied', path)\n"
    )
    result = await contained(pool, docker_client, test_labels, code)
    assert "OPENED" not in result.stdout and result.stdout.count("denied") == 2


async def test_filling_the_disk(test_labels: dict[str, str], docker_client: Any) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels, workdir_size_mb=48, tmp_size_mb=16)
    try:
        async with SandboxPool(backend, max_concurrency=1, limits=HOSTILE.merged(file_size_mb=8)) as pool:
            code = (
                "import errno\nfor target in ('big.bin', '/tmp/big.bin'):\n"
                "    try:\n        with open(target, 'wb') as f:\n"
                "            while True:\n                f.write(b'x' * (1 << 20))\n"
                "    except OSError as exc:\n        print(target, errno.errorcode[exc.errno])\n"
                "n = 0\ntry:\n    while True:\n        open(f'part{n}', 'wb').write(b'y' * (4 << 20))\n        n += 1\n"
                "except OSError as exc:\n    print('parts', errno.errorcode[exc.errno])\n"
            )
            result = await contained(pool, docker_client, test_labels, code)
            assert "big.bin EFBIG" in result.stdout and "/tmp/big.bin EFBIG" in result.stdout, result
            assert "parts ENOSPC" in result.stdout, result
            again = await pool.run("open('after.bin', 'wb').write(b'z' * (4 << 20)); print('room again')")
            assert again.stdout == "room again\n"  # reset freed the workspace
    finally:
        await backend.aclose()


async def test_exhausting_file_descriptors(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    code = (
        "import os, errno\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError as exc:\n    print(len(fds), errno.errorcode[exc.errno])\n"
    )
    result = await contained(pool, docker_client, test_labels, code)
    count, err = result.stdout.split()
    assert err == "EMFILE" and int(count) < 1024


async def test_the_engine_is_untouched(pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]) -> None:
    code = (
        "import os, socket\nprint(os.path.exists('/var/run/docker.sock'), os.getuid())\n"
        "try:\n    open('/proc/sysrq-trigger', 'w').write('b')\n    print('SYSRQ')\nexcept OSError:\n    print('no sysrq')\n"
    )
    result = await contained(pool, docker_client, test_labels, code)
    assert result.stdout == "False 1000\nno sysrq\n"
    assert os.path.exists("/proc")  # the host is fine


async def test_earlier_runs_leave_nothing_in_inherited_memory(
    backend: Any, pool: SandboxPool, docker_client: Any, test_labels: dict[str, str]
) -> None:
    # A pooled Python run is a child forked from the runner; it must not find an earlier run's
    # code, stdin or output in the memory it inherits (the runner zeroes its buffers). The
    # program dumps its writable memory and the test searches it here, so the secret never
    # appears in the searching program itself.
    secret = "K3Y" + "x7Qp" * 4
    if backend.runner == "static":
        pytest.skip("no program inherits the static runner's memory (each starts by exec); see test_docker_static.py")
    first = await pool.run(f"# {secret}\nprint(input()[::-1] + '{secret}')", stdin=f"{secret[::-1]}\n")
    assert first.stdout == secret * 2 + "\n"
    dump = (
        "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem, open('dump.bin', 'wb') as out:\n"
        "    for line in maps:\n"
        "        span, perms = line.split()[:2]\n"
        "        start, end = (int(x, 16) for x in span.split('-'))\n"
        "        if perms.startswith('rw') and end - start < (64 << 20):\n"
        "            mem.seek(start)\n            out.write(mem.read(end - start))\n"
    )
    result = await pool.run(dump, fetch_files=["dump.bin"])
    assert result.status is Status.OK, result
    memory = result.files["dump.bin"]
    assert b"in-container runner" in memory  # the dump does hold what the runner had (its own source)
    assert secret.encode() not in memory and secret[::-1].encode() not in memory
