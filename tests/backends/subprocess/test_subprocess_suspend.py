"""Suspend and resume of a subprocess session: no CPU while suspended; files, kernel variables and threads survive."""

from __future__ import annotations

import os
import time

import anyio
import pytest

from sandboxkit import SandboxPool

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup freezer needs root")

_SPIN = "import threading\nn = [0]\ndef spin():\n    while True:\n        n[0] += 1\nthreading.Thread(target=spin, daemon=True).start()"


def _cpu_ticks(dirs: list[str]) -> int:
    """CPU time (user + system, clock ticks) of every process in the sandbox's cgroup.

    Summed from ``/proc/PID/stat`` of the pids in ``cgroup.procs``: this host's v1 cpu
    hierarchy has no ``cpuacct`` beside it, and the processes are the same either way.
    """
    members: set[str] = set()
    for d in dirs:
        with open(os.path.join(d, "cgroup.procs")) as f:
            members |= set(f.read().split())
    assert members, f"no process in the sandbox's cgroups {dirs}"
    total = 0
    for pid in members:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


async def test_suspended_session_uses_no_cpu_and_keeps_its_state() -> None:
    async with SandboxPool("subprocess", max_concurrency=4) as pool, pool.session() as session:
        await session.write_files({"kept.txt": "hello"})
        await session.python("x = 41")
        await session.python(_SPIN)  # a thread the kernel started, burning CPU between calls
        assert session._entry is not None
        dirs = session._entry.sandbox.cgroup.dirs  # type: ignore[attr-defined]
        before = _cpu_ticks(dirs)
        time.sleep(0.3)
        assert _cpu_ticks(dirs) > before, "the spinning thread must show in the cgroup's CPU time"

        assert await session.suspend() is True
        assert session.suspended
        held = _cpu_ticks(dirs)
        time.sleep(1.0)
        assert _cpu_ticks(dirs) == held, "a suspended session used CPU"

        result = await session.python("print(x + 1, n[0] > 0, threading.active_count())")  # resumes by itself
        assert not session.suspended
        assert result.stdout.split() == ["42", "True", "2"]
        assert (await session.read_files(["kept.txt"]))["kept.txt"] == b"hello"
        spun = (await session.python("a = n[0]; import time; time.sleep(0.2); print(n[0] > a)")).stdout
        assert spun.strip() == "True", "the kernel's thread must run again after resume"


async def test_suspend_without_a_kernel_and_explicit_resume() -> None:
    async with SandboxPool("subprocess", max_concurrency=2) as pool, pool.session() as session:
        await session.exec("echo a > f")
        assert await session.suspend() is True
        await session.resume()
        assert not session.suspended
        assert (await session.exec("cat f")).stdout == "a\n"
        assert session.capabilities.suspend == "files+memory"


async def test_pool_suspends_an_idle_session_and_resumes_it_on_the_next_call() -> None:
    async with SandboxPool("subprocess", max_concurrency=2, suspend_idle_s=0.2) as pool, pool.session() as session:
        await session.python("y = 'kept'")
        for _ in range(200):  # waits for the state, not for a time: up to 20 s on a loaded machine
            if session.suspended:
                break
            await anyio.sleep(0.1)
        assert session.suspended, "a session idle past suspend_idle_s was not suspended"
        assert (await session.python("print(y)")).stdout == "kept\n"  # resumed by the call itself
