"""Suspend and resume on the cloud backends: what Daytona and E2B share, written once.

``tests/backends/<service>/test_<service>_suspend.py`` subclasses :class:`SuspendBehaviour` with
that service's ``fake`` and ``make_backend`` fixtures, and adds what differs (what survives).
"""

from __future__ import annotations

import subprocess

import pytest

from sandboxkit import SandboxPool
from sandboxkit.errors import SandboxCrashed

from ._common import Box, FakeService, wait_until
from .cloud_tests import SHORT, MakeBackend


def start_in_box(box: Box, command: str = "sleep 300") -> subprocess.Popen[bytes]:
    """A process running in the sandbox between commands (a server, a kernel), as the fake sees it: marked as the box's.

    Returned once the box sees it (until its ``exec`` the child still has this process's environment).
    """
    process = subprocess.Popen(["bash", "-c", command], cwd=box.home, env=box.env(), start_new_session=True)
    assert wait_until(lambda: process.pid in box.running()), "the process never showed as the box's"
    return process


class SuspendBehaviour:
    """Each test fails on a backend that leaves a session stuck on a sandbox that cannot come back."""

    async def test_sandbox_gone_while_suspended_is_replaced_on_the_next_call(
        self, fake: FakeService, make_backend: MakeBackend
    ) -> None:
        async with SandboxPool(make_backend(), limits=SHORT) as pool, pool.session() as session:
            await session.write_files({"a": "1"})
            assert await session.suspend()
            fake.vanish(str(session.sandbox_id))
            with pytest.raises(SandboxCrashed):
                await session.exec("cat a")  # resumes first: the sandbox is gone, which the program did not cause
            assert not session.suspended and session.restarts == 1
            assert (await session.exec("echo fresh")).stdout == "fresh\n"  # a new sandbox
            assert session.sandbox_id in fake.live_ids()
        assert fake.live_count == 0
