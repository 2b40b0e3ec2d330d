"""``Session`` (``sandboxkit.session``): state kept across calls, its share of the caps, what a failure does to it."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from sandboxkit import (
    DeadlineExceeded,
    InvalidRequest,
    RunResult,
    SandboxCrashed,
    SandboxPool,
    Status,
    Transient,
)
from sandboxkit.testing import FakeBackend

FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


async def test_session_keeps_state_and_counts_against_the_cap() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=2, max_sandboxes=2) as pool:
        async with pool.session() as s:
            await s.write_files({"a.txt": "1"})
            assert await s.read_files(["a.txt"]) == {"a.txt": b"1"}
            assert pool.open_sandboxes == 1
            assert (await pool.run("ok")).status is Status.OK
        assert pool.open_sandboxes >= 1  # the session's sandbox was reset and kept warm
    assert not backend.live


async def test_session_reopens_after_a_crash() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend) as pool, pool.session() as s:
        first = s.sandbox_id
        with pytest.raises(SandboxCrashed):
            await s.run("crash")
        assert (await s.run("ok")).sandbox_id != first
        assert s.restarts == 1


async def test_sessions_holding_every_sandbox_do_not_deadlock_pooled_calls() -> None:
    # Pooled calls waiting for a sandbox must not sit on the call slots the sessions need.
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=2, max_sandboxes=2) as pool:
        s1, s2 = pool.session(), pool.session()
        await s1.open()
        await s2.open()
        waiting = asyncio.ensure_future(pool.run_many([{"code": "ok"}] * 5))
        await asyncio.sleep(0.05)
        with anyio.fail_after(5):
            assert (await s1.run("sleep:0.01")).status is Status.OK
            assert (await s2.exec("ok")).status is Status.OK
        await s1.close()
        await s2.close()
        with anyio.fail_after(5):
            results = await waiting
        assert [r.status for r in results if isinstance(r, RunResult)] == [Status.OK] * 5


async def test_session_calls_are_counted_in_metrics() -> None:
    async with SandboxPool(FakeBackend()) as pool, pool.session() as s:
        await s.run("ok")
        await s.run("fail")
        assert pool.metrics()["calls"] == 2
        assert pool.metrics()["statuses"] == {"ok": 1, "failed": 1}


@pytest.mark.parametrize("max_sandboxes", [1, 2])
async def test_sessions_pooled_calls_and_judge_style_sessions_share_every_sandbox_without_deadlock(
    max_sandboxes: int,
) -> None:
    # The judge opens a session per compiled submission (hold a sandbox, then several calls) while
    # other submissions run pooled calls; with as few sandboxes as call slots, any lock-order bug
    # (a caller waiting for a sandbox while sitting on a call slot) hangs here.
    backend = FakeBackend(open_delay_s=0.001)
    done: list[str] = []
    async with SandboxPool(backend, max_concurrency=2, max_sandboxes=max_sandboxes, **FAST) as pool:

        async def judge_style(i: int) -> None:
            async with pool.session() as session:
                await session.run(f"sleep:0.00{i % 3}")
                for _ in range(3):
                    assert (await session.exec("ok")).status is Status.OK
            done.append("session")

        async def pooled(i: int) -> None:
            assert (await pool.run(f"sleep:0.00{i % 2}")).status is Status.OK
            done.append("pooled")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(30):
                    tg.start_soon(judge_style, i)
                    tg.start_soon(pooled, i)
    assert done.count("session") == done.count("pooled") == 30
    assert backend.peak_live <= max_sandboxes
    assert backend.peak_in_flight <= 2
    assert not backend.live


async def test_a_callers_invalid_request_keeps_the_session_and_its_state() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, **FAST) as pool, pool.session() as s:
        await s.write_files({"state.txt": "kept"})
        first = s.sandbox_id
        with pytest.raises(InvalidRequest, match=r"\.\."):
            await s.write_files({"../escape.txt": "x"})  # rejected by the sandbox itself
        with pytest.raises(InvalidRequest, match="cannot run 'go'"):
            await s.run("x", language="go")
        assert s.sandbox_id == first and s.restarts == 0
        assert await s.read_files(["state.txt"]) == {"state.txt": b"kept"}
        assert pool.open_sandboxes == 1


@pytest.mark.parametrize("failure", ["crash", "transient:1", "bug", "deadline", "cancel"])
async def test_an_infrastructure_failure_discards_the_sessions_sandbox(failure: str) -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, retries=3, **FAST) as pool, pool.session() as s:
        await s.write_files({"state.txt": "lost"})
        first = s.sandbox_id
        if failure == "deadline":
            with pytest.raises(DeadlineExceeded):
                await s.run("sleep:5", deadline_s=0.05)
        elif failure == "cancel":
            with anyio.move_on_after(0.05):
                await s.run("sleep:5")
        else:
            with pytest.raises((SandboxCrashed, Transient, RuntimeError)):
                await s.run(failure)
        assert backend.attempts.get(failure, 1) == 1, "a session's turn is never retried: its state may have changed"
        assert s.restarts == 1 and s.sandbox_id is None
        assert first not in {sb.id for sb in backend.live}, "the sandbox in an unknown state was closed"
        assert await s.read_files(["state.txt"]) == {}, "the next call runs in a fresh sandbox"
        assert s.sandbox_id != first
