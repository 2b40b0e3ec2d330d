"""Daytona's own traps, each shown with the raw SDK against the fake, then handled by the backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from fakes.cloud_tests import SHORT
from fakes.daytona_fake import FakeDaytona
from sandboxkit import SandboxPool, SyncSandboxPool
from sandboxkit.backends.daytona import DaytonaBackend, DaytonaSandbox
from sandboxkit.errors import Transient
from sandboxkit.models import Status


def test_one_backend_serves_several_event_loops(fake: FakeDaytona) -> None:
    """AsyncDaytona binds its HTTP session to the first loop that used it; the backend keeps one per loop."""
    backend = DaytonaBackend(api_key=fake.api_key, api_url=fake.api_url)
    with SyncSandboxPool(backend, max_concurrency=2, limits=SHORT) as sync_pool:  # its own loop thread
        assert sync_pool.run("print('on the pool thread')").stdout == "on the pool thread\n"
        # The pool does not own the backend: close the pool, then the backend's client of that loop.
        sync_pool.submit(lambda pool: pool.aclose()).result()
        sync_pool.submit(lambda _: backend.aclose()).result()

    async def on_a_new_loop() -> str:
        async with SandboxPool(backend, limits=SHORT) as pool:
            out = (await pool.run("print('on asyncio.run')")).stdout
        await backend.aclose()  # closes this loop's client only
        return out

    assert asyncio.run(on_a_new_loop()) == "on asyncio.run\n"

    # A sandbox opened on one loop keeps working when used from another one.
    async def open_and_leave() -> DaytonaSandbox:
        sb = await backend.open(SHORT)
        await backend.aclose()
        return sb

    sandbox = asyncio.run(open_and_leave())

    async def use_elsewhere() -> str:
        try:
            return (await sandbox.exec("echo moved")).stdout
        finally:
            await sandbox.close()
            await backend.aclose()

    assert asyncio.run(use_elsewhere()) == "moved\n"
    assert fake.live_count == 0


async def test_process_exec_merges_streams_so_runs_use_sessions(
    make_backend: Callable[..., DaytonaBackend],
) -> None:
    sb = await make_backend().open(SHORT)
    assert isinstance(sb, DaytonaSandbox)
    try:
        raw = await sb._sdk.process.exec("echo to-out; echo to-err >&2")
        assert "to-out" in raw.result and "to-err" in raw.result  # the SDK's exec cannot tell them apart
        kept_apart = await sb.exec("echo to-out; echo to-err >&2")
        assert (kept_apart.stdout, kept_apart.stderr) == ("to-out\n", "to-err\n")
    finally:
        await sb.close()


async def test_create_timeout_after_the_api_answered_deletes_the_reported_sandbox(
    fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]
) -> None:
    """The SDK attaches ``sandbox_id`` to its timeout when the sandbox exists but never started."""
    fake.start_state = "starting"  # created, but it never reaches "started"
    with pytest.raises(Transient, match="took longer"):
        await make_backend(create_timeout_s=1.0).open(SHORT)
    assert fake.ledger.created == 1
    assert fake.live_count == 0


async def test_a_stuck_session_does_not_block_the_next_command(
    fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]
) -> None:
    """Session commands run one after another in one shell; a stuck one is dropped with its session."""
    sb = await make_backend(grace_s=0.5).open(SHORT)
    try:
        fake.inject("exec", delay_s=5)
        assert (await sb.exec("true", timeout=0.5)).status is Status.TIMEOUT
        assert (await sb.exec("echo unblocked", timeout=2)).stdout == "unblocked\n"
    finally:
        await sb.close()


async def test_labels_and_resources_options(fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]) -> None:
    from sandboxkit.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="image"):
        make_backend(cpu=2)
    backend = make_backend(labels={"team": "rl"}, ttl_minutes=90, auto_stop_minutes=5)
    sb = await backend.open(SHORT.merged(network=True))
    try:
        body = fake.box(sb.id).data
        assert body["labels"]["team"] == "rl" and body["labels"]["sandboxkit"] == "1"
        assert body["ttlMinutes"] == 90 and body["autoStopInterval"] == 5
        assert body["networkBlockAll"] is False
    finally:
        await sb.close()


async def test_session_logs_are_line_labelled_so_output_comes_back_through_the_wrapper_frame(
    make_backend: Callable[..., DaytonaBackend],
) -> None:
    """The daemon re-prints each line of session output with a newline and drops NUL bytes."""
    from daytona import SessionExecuteRequest

    sb = await make_backend().open(SHORT)
    assert isinstance(sb, DaytonaSandbox)
    try:
        await sb._sdk.process.create_session("raw")
        raw = await sb._sdk.process.execute_session_command(
            "raw", SessionExecuteRequest(command=r"printf 'x'; printf 'a\0b' >&2", run_async=False)
        )
        assert (raw.stdout, raw.stderr) == ("x\n", "ab\n")  # not what the program wrote
        exact = await sb.exec(r"printf 'x'; printf 'a\0b' >&2")
        assert (exact.stdout, exact.stderr) == ("x", "a\0b")
    finally:
        await sb.close()


async def test_the_org_quota_is_a_403_the_sdk_calls_forbidden_but_it_is_capacity(
    fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]
) -> None:
    """Over the vCPU quota the API answers 403 "Total CPU limit exceeded" (400 on older releases)."""
    from daytona import AsyncDaytona, DaytonaConfig, DaytonaForbiddenError

    from sandboxkit.errors import BackendUnavailable, CapacityExceeded

    fake.quota = 1
    backend = make_backend()
    held = await backend.open(SHORT)
    try:
        async with AsyncDaytona(DaytonaConfig(api_key=fake.api_key, api_url=fake.api_url)) as raw:
            with pytest.raises(DaytonaForbiddenError, match=r"Total CPU limit exceeded\. Maximum allowed: 1"):
                await raw.create(timeout=10)
        for status in (403, 400):
            fake.quota_status = status
            with pytest.raises(CapacityExceeded) as info:
                await backend.open(SHORT)
            assert info.value.limit == 1 and "rejected the credentials" not in str(info.value)
        fake.quota, fake.concurrency = None, 1  # a concurrent-sandbox cap answered 429
        with pytest.raises(CapacityExceeded) as info:
            await backend.open(SHORT)
        assert info.value.limit == 1
        assert fake.ledger.rejected == {403: 2, 400: 1, 429: 1}
    finally:
        await held.close()
    fake.inject("create", status=403, message="Forbidden resource")  # a real permission problem stays fatal
    with pytest.raises(BackendUnavailable, match="DAYTONA_API_KEY"):
        await backend.open(SHORT)
    assert fake.live_count == 0
