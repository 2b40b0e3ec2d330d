"""E2B's own traps, each shown with the raw SDK against the fake, then handled by the backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from fakes.cloud_tests import SHORT
from fakes.e2b_fake import FakeE2B
from sandboxkit import SandboxPool, SyncSandboxPool
from sandboxkit.backends.e2b import E2BBackend, E2BSandbox
from sandboxkit.models import Status


async def test_nonzero_exit_raises_in_the_sdk_but_is_a_result_here(make_backend: Callable[..., E2BBackend]) -> None:
    from e2b import CommandExitException

    sb = await make_backend().open(SHORT)
    assert isinstance(sb, E2BSandbox)
    try:
        with pytest.raises(CommandExitException):
            await sb._sdk.commands.run("echo partial; exit 3")
        result = await sb.exec("echo partial; exit 3")
        assert (result.status, result.exit_code, result.stdout) == (Status.FAILED, 3, "partial\n")
    finally:
        await sb.close()


async def test_sdk_timeout_leaves_the_process_running_the_backend_does_not(
    fake: FakeE2B, make_backend: Callable[..., E2BBackend]
) -> None:
    from e2b import TimeoutException

    sb = await make_backend().open(SHORT)
    assert isinstance(sb, E2BSandbox)
    try:
        with pytest.raises(TimeoutException):
            await sb._sdk.commands.run("sleep 20", timeout=1)
        assert fake.running_processes(sb.id), "the SDK's timeout only stops waiting (E2B#500)"
        for pid in list(fake.box(sb.id).procs):
            await sb._sdk.commands.kill(pid)
        assert (await sb.exec("sleep 20", timeout=1)).status is Status.TIMEOUT
        assert fake.running_processes(sb.id) == []
    finally:
        await sb.close()


async def test_lifetime_is_renewed_while_the_owner_holds_the_sandbox(
    fake: FakeE2B, make_backend: Callable[..., E2BBackend]
) -> None:
    sb = await make_backend(sandbox_timeout_s=2).open(SHORT)
    try:
        assert fake.box(sb.id).data["timeout"] == 2
        await asyncio.sleep(3.0)  # past the lifetime with no call: only the owner's renewals keep it
        assert sb.id in fake.live_ids() and fake.ledger.expired == []
        assert fake.timeouts[:2] == [(sb.id, 2), (sb.id, 2)]  # three renewals per lifetime
        assert (await sb.exec("echo still")).stdout == "still\n"
    finally:
        await sb.close()


def test_one_backend_serves_several_event_loops(fake: FakeE2B) -> None:
    backend = E2BBackend(api_key=fake.api_key, api_url=fake.url, sandbox_url=fake.url)
    with SyncSandboxPool(backend, limits=SHORT) as sync_pool:
        assert sync_pool.run("print('thread loop')").stdout == "thread loop\n"

    async def main() -> str:
        async with SandboxPool(backend, limits=SHORT) as pool:
            return (await pool.run("print('main loop')")).stdout

    assert asyncio.run(main()) == "main loop\n"
    assert fake.live_count == 0


def test_invalid_lifetime_is_refused(fake: FakeE2B) -> None:
    from sandboxkit.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="sandbox_timeout_s"):
        E2BBackend(api_key=fake.api_key, sandbox_timeout_s=0)
    assert E2BBackend.availability(api_key="k").usable


async def test_the_concurrent_sandbox_429_is_capacity_not_rate(
    fake: FakeE2B, make_backend: Callable[..., E2BBackend]
) -> None:
    """E2B answers a team at its limit with the same 429 as a rate limit; the body tells them apart."""
    from e2b import AsyncSandbox, RateLimitException

    from sandboxkit.errors import CapacityExceeded

    fake.quota = 1
    backend = make_backend()
    held = await backend.open(SHORT)
    try:
        with pytest.raises(RateLimitException, match=r"maximum number of concurrent E2B sandboxes \(1\)"):
            await AsyncSandbox.create(api_key=fake.api_key, api_url=fake.url, sandbox_url=fake.url, retries=0)
        with pytest.raises(CapacityExceeded) as info:
            await backend.open(SHORT)
        assert info.value.limit == 1 and "e2b.dev" in str(info.value)
    finally:
        await held.close()
    assert fake.live_count == 0
