"""``Started``: a coroutine stepped to its first wait, so a pool sets up a reset's timeout only when it waits."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from sandboxkit import SandboxPool, Status, _lease
from sandboxkit._started import Started
from sandboxkit.testing import FakeBackend
from sandboxkit.testing.fake import FakeSandbox


async def _returns_at_once() -> int:
    return 7


async def _waits_then_returns() -> int:
    await asyncio.sleep(0)
    await asyncio.sleep(0.001)
    return 8


async def test_a_coroutine_that_never_waits_is_done_after_its_first_step() -> None:
    started = Started(_returns_at_once())
    assert (started.done, started.result) == (True, 7)
    assert await started == 7


async def test_a_coroutine_that_waits_finishes_when_awaited() -> None:
    started = Started(_waits_then_returns())
    assert not started.done
    assert await started == 8
    assert (started.done, started.result) == (True, 8)


async def test_an_error_before_the_first_wait_is_raised_by_the_step() -> None:
    async def fails() -> None:
        raise ValueError("before any wait")

    with pytest.raises(ValueError, match="before any wait"):
        Started(fails())


async def test_a_timeout_around_the_rest_reaches_the_coroutine() -> None:
    cleaned: list[str] = []

    async def hangs() -> bool:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("finally ran")
        return True

    started = Started(hangs())
    with anyio.move_on_after(0.01) as scope:
        await started
    assert scope.cancelled_caught
    assert cleaned == ["finally ran"]


async def test_a_reset_that_hangs_still_gives_up_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's reset timeout holds for a reset that waits: the sandbox is closed, the pool goes on."""

    async def hung_reset(self: FakeSandbox) -> bool:
        await asyncio.Event().wait()
        return True

    monkeypatch.setattr(FakeSandbox, "reset", hung_reset)
    monkeypatch.setattr(_lease, "CLOSE_TIMEOUT_S", 0.05)
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=1) as pool:
        assert (await pool.run("print(1)")).status is Status.OK
        assert (await pool.run("print(1)")).status is Status.OK
        assert pool.metrics()["sandboxes_closed"] == 2, "a sandbox whose reset timed out was kept"


async def test_a_reset_that_holds_a_cancel_scope_across_its_wait_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker's reset enters a timeout scope before its first wait: stepping it before the pool's own
    timeout scope would nest the two the wrong way round (anyio refuses to exit them). Only a sandbox
    that says its reset holds no scope across a wait is stepped first."""

    async def scoped_reset(self: FakeSandbox) -> bool:
        with anyio.fail_after(5):
            await anyio.sleep(0.001)
        self.files.clear()
        return True

    monkeypatch.setattr(FakeSandbox, "reset", scoped_reset)
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=1) as pool:
        for _ in range(3):
            assert (await pool.run("print(1)")).status is Status.OK
        assert pool.metrics()["sandboxes_created"] == 1, "the sandbox was not kept after its reset"
