"""Suspended sessions count against their own cap (``max_suspended``), never against ``max_sandboxes``.

A session suspended while the model thinks holds no CPU; if it still held one of the pool's
running sandboxes, a pool of suspended agents would block every new call. Run on the
subprocess backend, whose suspend (the cgroup freezer) is real here.
"""

from __future__ import annotations

import os

import anyio
import pytest

from sandboxkit import SandboxPool

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup freezer needs root")


async def test_suspended_sessions_do_not_block_running_calls() -> None:
    async with SandboxPool("subprocess", max_sandboxes=2, max_concurrency=4) as pool:
        sessions = [pool.session() for _ in range(2)]
        for i, s in enumerate(sessions):
            await s.write_files({"mine.txt": str(i)})
            assert await s.suspend() is True
        with anyio.fail_after(30):  # before: waited for a sandbox forever (both slots held by suspended ones)
            assert (await pool.run("print('ran')")).stdout == "ran\n"
            results = [await pool.run(f"print({i})") for i in range(3)]
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
        with anyio.fail_after(30):  # resuming takes a running slot back: the idle one is closed for it
            for i, s in enumerate(sessions):
                assert (await s.exec("cat mine.txt")).stdout == str(i)
        for s in sessions:
            await s.close()


async def test_max_suspended_caps_the_suspended_sessions() -> None:
    async with SandboxPool("subprocess", max_sandboxes=3, max_suspended=1) as pool:
        first, second = pool.session(), pool.session()
        await first.exec("true")
        await second.exec("true")
        assert await first.suspend() is True
        assert await second.suspend() is False, "over max_suspended: it keeps running, nothing changed"
        assert not second.suspended and (await second.exec("echo ok")).stdout == "ok\n"
        await first.close()
        await second.close()
