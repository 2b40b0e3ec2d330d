"""The lease core (``sandboxkit._lease``) under a pool: retries, backoff, deadlines, warm reuse, discards."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandboxkit import (
    BackendUnavailable,
    DeadlineExceeded,
    RateLimited,
    SandboxCrashed,
    SandboxPool,
    Status,
    Transient,
)
from sandboxkit.testing import FakeBackend

FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


async def test_transient_errors_are_retried_with_backoff() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, retries=3, **FAST) as pool:
        result = await pool.run("transient:2")
        assert result.status is Status.OK
        assert backend.attempts["transient:2"] == 3
        assert pool.metrics()["retries"] == 2
        with pytest.raises(Transient):
            await pool.run("transient:9")
        assert backend.attempts["transient:9"] == 4  # first try + 3 retries


async def test_rate_limited_is_retried_and_honours_retry_after() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, retries=2, backoff_base_s=0.0001, backoff_max_s=1.0) as pool:
        started = time.monotonic()
        result = await pool.run("ratelimit:1")
    assert result.status is Status.OK
    assert time.monotonic() - started >= 0.01  # retry_after of the injected 429


async def test_a_crashed_sandbox_is_discarded_not_retried() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=1, retries=5, **FAST) as pool:
        first = await pool.run("ok")
        with pytest.raises(SandboxCrashed):
            await pool.run("crash")
        second = await pool.run("ok")
        assert backend.attempts["crash"] == 1
        assert first.sandbox_id != second.sandbox_id, "the crashed sandbox must not be reused"
        assert pool.metrics()["errors"] == {"sandbox_crashed": 1}


async def test_open_failures_are_retried_then_surface() -> None:
    backend = FakeBackend(open_failures=2)
    async with SandboxPool(backend, retries=2, **FAST) as pool:
        assert (await pool.run("ok")).status is Status.OK
    down = FakeBackend(open_failures=100, open_error=BackendUnavailable)
    async with SandboxPool(down, retries=5, **FAST) as pool:
        with pytest.raises(BackendUnavailable):
            await pool.run("ok")
    assert down.opens_attempted == 1, "BackendUnavailable is not transient: no retry"


async def test_deadline_covers_the_whole_call() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, deadline_s=0.2) as pool:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="deadline"):
            await pool.run("sleep:5")
        assert time.monotonic() - started < 2
        assert not backend.live, "the sandbox interrupted by the deadline is discarded"
        assert (await pool.run("ok", deadline_s=5)).status is Status.OK


async def test_warm_sandboxes_reuse_and_recycling() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=2, warm=2, max_uses=3) as pool:
        assert len(backend.created_at) == 2
        for _ in range(6):
            await pool.run("ok")
        # sequential calls reuse the most recent sandbox: 3 uses each before recycling
        assert len(backend.created_at) <= 4
        assert backend.resets >= 3, "a reused sandbox is reset between unrelated runs"
    assert not backend.live


async def test_dead_sandboxes_are_not_leased() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=1) as pool:
        first = await pool.run("ok")
        next(iter(backend.live)).healthy = False
        second = await pool.run("ok")
        assert first.sandbox_id != second.sandbox_id
        assert pool.metrics()["errors"]["dead_on_lease"] == 1


async def test_rate_limited_open_penalizes_the_bucket() -> None:
    backend = FakeBackend(open_failures=1, open_error=lambda msg: RateLimited(msg, retry_after=0.05))  # type: ignore[arg-type]
    async with SandboxPool(backend, creation_rate=100, retries=2, backoff_base_s=0.0001) as pool:
        started = time.monotonic()
        await pool.run("ok")
    assert time.monotonic() - started >= 0.04


async def test_an_infrastructure_timeout_is_deadline_exceeded_never_a_program_timeout() -> None:
    # A run cut by the pool's deadline (queue wait or a slow service) must reach the trainer as
    # "no reward" (an exception), never as a result with status timeout (a reward of 0).
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=1, deadline_s=0.2, **FAST) as pool:
        with pytest.raises(DeadlineExceeded, match="infrastructure timeout"):
            await pool.run("sleep:5")
        with pytest.raises(DeadlineExceeded, match="infrastructure timeout"):
            await pool.exec("sleep:5")
        async with pool.session() as s:  # a session honours the pool's default deadline too
            with pytest.raises(DeadlineExceeded, match="session call"):
                await s.run("sleep:5")
        # Queue wait: the only call slot is busy for longer than the deadline.
        busy = asyncio.ensure_future(pool.run("sleep:0.6", deadline_s=5))
        await asyncio.sleep(0.05)
        with pytest.raises(DeadlineExceeded):
            await pool.run("ok")
        assert (await busy).status is Status.OK
        # In a batch, each item is its own DeadlineExceeded (the second waited behind the first).
        results = await pool.run_many([{"code": "sleep:5"}, {"code": "ok"}])
        assert [type(r) for r in results] == [DeadlineExceeded, DeadlineExceeded]
        m = pool.metrics()
        assert Status.TIMEOUT.value not in m["statuses"]
        assert m["errors"]["deadline_exceeded"] == 6
