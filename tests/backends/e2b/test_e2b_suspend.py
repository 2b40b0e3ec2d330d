"""Suspend and resume on E2B (its pause / connect), against the loopback fake driven by the real SDK.

E2B's pause keeps memory: the sandbox's processes stop where they are and go on after the
resume. The fake models that with SIGSTOP / SIGCONT of the box's processes; the first test
below holds the fake to what the SDK documents, the rest hold the backend to the fake.
"""

from __future__ import annotations

from collections.abc import Callable

from fakes._common import wait_until
from fakes.e2b_fake import FakeE2B
from fakes.suspend_tests import SuspendBehaviour, start_in_box
from sandboxkit import SandboxPool
from sandboxkit.backends.e2b import E2BBackend
from sandboxkit.models import Limits

SHORT = Limits(timeout_s=10)
MakeBackend = Callable[..., E2BBackend]
#: A counter running in the sandbox between calls: a line into ``count`` every tenth of a second.
COUNTER = "while true; do echo x >> count; sleep 0.1; done"


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


async def test_fake_pause_follows_the_sdk(fake: FakeE2B) -> None:
    """SDK docs: pause → True, again → False (already paused); connect resumes it; a paused one never times out."""
    from e2b import AsyncSandbox

    params = {"api_key": fake.api_key, "api_url": fake.url, "sandbox_url": fake.url}
    sdk = await AsyncSandbox.create(timeout=2, **params)  # type: ignore[arg-type]
    counter = start_in_box(fake.box(sdk.sandbox_id), COUNTER)
    assert await sdk.pause() is True
    assert await sdk.pause() is False
    (info,) = await AsyncSandbox.list(**params).next_items()  # type: ignore[arg-type]
    assert str(info.state.value if hasattr(info.state, "value") else info.state) == "paused"
    assert _proc_state(counter.pid) == "T"  # memory kept, nothing runs
    assert not await sdk.is_running()  # envd does not answer a paused sandbox
    assert not wait_until(lambda: fake.live_count == 0, 3.0), "a paused sandbox has no timeout"
    await sdk.connect(timeout=2)
    assert _proc_state(counter.pid) != "T"
    assert (await sdk.commands.run("echo back")).stdout == "back\n"
    assert wait_until(lambda: fake.ledger.expired == [sdk.sandbox_id], 5.0), "a running sandbox dies at its timeout"
    assert fake.live_count == 0 and counter.wait(5) == -9


async def test_suspended_session_keeps_files_and_processes(fake: FakeE2B, make_backend: MakeBackend) -> None:
    backend = make_backend()
    assert backend.capabilities.suspend == "files+memory"
    async with SandboxPool(backend, limits=SHORT) as pool, pool.session() as session:
        await session.write_files({"kept.txt": "hello"})
        box = fake.box(str(session.sandbox_id))
        counter = start_in_box(box, COUNTER)
        count = box.home / "count"
        assert wait_until(lambda: count.exists() and count.read_text().count("x") > 2)
        assert await session.suspend() is True and session.suspended
        assert box.data["state"] == "paused" and fake.pauses == [session.sandbox_id]
        assert _proc_state(counter.pid) == "T"
        lines = count.read_text().count("x")
        assert not wait_until(lambda: count.read_text().count("x") > lines + 1, 0.5), "a paused sandbox runs nothing"

        result = await session.exec(f"cat kept.txt; kill -0 {counter.pid} && echo alive")  # resumes by itself
        assert result.stdout == "helloalive\n" and not session.suspended
        assert box.data["state"] == "running"
        assert wait_until(lambda: count.read_text().count("x") > lines + 2, 5.0), "its process goes on where it stopped"


class TestE2BSuspend(SuspendBehaviour):
    """The shared behaviour (tests/fakes/suspend_tests.py), with this directory's fixtures."""
