"""Suspend and resume on Daytona (its stop / start), against the loopback fake driven by the real SDK.

A Daytona stop keeps the sandbox's disk and ends its processes; an ephemeral sandbox is deleted
as it stops. The first test holds the fake to that (the SDK documents both); the others hold
the backend to the fake: sandboxkit's sandboxes are ephemeral, so a suspend must not delete one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fakes.daytona_fake import FakeDaytona
from fakes.suspend_tests import SuspendBehaviour, start_in_box
from sandboxkit import SandboxPool
from sandboxkit.backends.daytona import DaytonaBackend
from sandboxkit.models import Limits

SHORT = Limits(timeout_s=10)
MakeBackend = Callable[..., DaytonaBackend]


async def test_fake_stop_follows_the_sdk(fake: FakeDaytona) -> None:
    """SDK docs: stop ends the processes, keeps the files; ephemeral (auto-delete 0) means deleted on stop."""
    from daytona import AsyncDaytona, CreateSandboxFromSnapshotParams, DaytonaConfig

    async with AsyncDaytona(DaytonaConfig(api_key=fake.api_key, api_url=fake.api_url)) as client:
        kept = await client.create(CreateSandboxFromSnapshotParams(auto_delete_interval=-1))
        gone = await client.create(CreateSandboxFromSnapshotParams(ephemeral=True))
        await kept.fs.upload_file(b"data", "f.txt")
        process = start_in_box(fake.box(kept.id))
        await kept.stop()
        assert process.wait(5) == -9 and fake.running_processes(kept.id) == []
        assert str(kept.state.value if hasattr(kept.state, "value") else kept.state) == "stopped"
        with pytest.raises(Exception, match="400"):  # the toolbox of a stopped sandbox refuses
            await kept.fs.download_file("f.txt")
        await kept.start()
        assert await kept.fs.download_file("f.txt") == b"data"
        await gone.stop()  # the SDK's wait treats "destroyed" as stopped
        assert fake.live_ids() == [kept.id]
        await kept.delete()


async def test_suspended_session_keeps_files_not_processes(fake: FakeDaytona, make_backend: MakeBackend) -> None:
    backend = make_backend()
    assert backend.capabilities.suspend == "files"
    async with SandboxPool(backend, limits=SHORT) as pool, pool.session() as session:
        await session.write_files({"kept.txt": "hello"})
        box = fake.box(str(session.sandbox_id))
        process = start_in_box(box)
        assert box.data["autoDeleteInterval"] == 0  # ephemeral: a plain stop would delete it
        assert await session.suspend() is True and session.suspended
        assert box.data["state"] == "stopped" and fake.stops == [session.sandbox_id]
        assert session.sandbox_id in fake.live_ids(), "the stop deleted the suspended sandbox"
        assert box.data["autoDeleteInterval"] == backend.lifetime_minutes
        assert process.wait(5) == -9, "a stop ends the sandbox's processes"

        result = await session.exec("cat kept.txt")  # starts it again by itself
        assert result.stdout == "hello" and not session.suspended and session.restarts == 0
        assert box.data["state"] == "started" and box.data["autoDeleteInterval"] == 0
    assert fake.live_count == 0


class TestDaytonaSuspend(SuspendBehaviour):
    """The shared behaviour (tests/fakes/suspend_tests.py), with this directory's fixtures."""
