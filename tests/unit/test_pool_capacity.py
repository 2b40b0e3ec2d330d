"""Learned concurrency: a service limited below ``max_concurrency`` makes calls wait, never fail.

The fake service (``sandboxkit.testing.FakeBackend(capacity=N)``) refuses an ``open`` beyond N
live sandboxes with ``CapacityExceeded``, as Daytona's quota answer and E2B's concurrent-sandbox
429 are mapped. The pool must learn the cap (AIMD), queue calls behind it, and grow back when
the service allows more.
"""

from __future__ import annotations

import anyio
import pytest

from sandboxkit import CapacityExceeded, DeadlineExceeded, Limits, RateLimited, RunResult, SandboxPool, Status
from sandboxkit.testing import FakeBackend

FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


async def test_a_batch_larger_than_the_service_limit_waits_instead_of_failing() -> None:
    backend = FakeBackend(capacity=2, open_delay_s=0.002)
    codes = [f"sleep:0.00{i % 5}" for i in range(32)]
    async with SandboxPool(backend, max_concurrency=16, **FAST) as pool:
        with anyio.fail_after(30):
            results = await pool.run_many([{"code": c} for c in codes])
        metrics = pool.metrics()
    assert not [r for r in results if isinstance(r, RateLimited)], "a call that only had to wait failed"
    assert all(isinstance(r, RunResult) and r.status is Status.OK for r in results), results
    assert [r.stdout for r in results if isinstance(r, RunResult)] == codes, "every result is its own call's"
    assert backend.peak_live <= 2
    assert backend.capacity_refusals >= 1, "the service never refused: the test did not exercise the limit"
    # The cap is the service's limit, or one above it when the batch ended before the next probe.
    assert 2 <= metrics["learned_cap"] <= 3
    assert metrics["capacity_refusals"] == backend.capacity_refusals
    assert metrics["retries"] == 0, "waiting for capacity must not spend the retry budget"
    assert metrics["errors"] == {}
    # Probing for more capacity is allowed, a storm of refusals is not: about one probe per round of cap calls.
    assert backend.capacity_refusals <= 16 + 32 // 2
    assert not backend.live


async def test_the_learned_cap_grows_back_when_the_service_allows_more() -> None:
    backend = FakeBackend(capacity=2, open_delay_s=0.001)
    async with SandboxPool(backend, max_concurrency=16, **FAST) as pool:
        await pool.run_many([{"code": "sleep:0.002"}] * 32)
        assert pool.metrics()["learned_cap"] <= 3
        backend.capacity = 12  # the account's limit was raised
        backend.peak_live = 0
        for _ in range(6):
            results = await pool.run_many([{"code": "sleep:0.002"}] * 48)
            assert all(isinstance(r, RunResult) for r in results)
        grown = pool.metrics()["learned_cap"]
        assert grown >= 8, f"the cap did not grow back towards the new limit: {grown}"
        assert backend.peak_live > 2
        backend.capacity = 3  # and lowered again: the next refusal brings the cap down
        refusals = backend.capacity_refusals
        await pool.run_many([{"code": "sleep:0.002"}] * 32)
        assert backend.capacity_refusals > refusals
    assert not backend.live


async def test_a_service_that_refuses_everything_is_an_outage_after_the_retries() -> None:
    backend = FakeBackend(capacity=0)
    async with SandboxPool(backend, retries=2, **FAST) as pool:
        with pytest.raises(CapacityExceeded, match="maximum number of concurrent sandboxes"):
            await pool.run("ok")
        assert backend.capacity_refusals == 3, "holding nothing, a refusal is retried like any 429, then raised"
        assert pool.metrics()["learned_cap"] == 1, "never below 1"


async def test_a_call_queued_behind_the_learned_cap_ends_at_its_deadline() -> None:
    backend = FakeBackend(capacity=1)
    async with SandboxPool(backend, max_concurrency=4, **FAST) as pool, pool.session() as held:
        assert held.sandbox_id is not None
        with pytest.raises(DeadlineExceeded, match="infrastructure timeout"):
            await pool.run("ok", deadline_s=0.3)
        assert pool.metrics()["retries"] == 0
        assert backend.capacity_refusals == 1, "learned once, then the call waited without asking again"


async def test_idle_warm_sandboxes_are_closed_to_make_room() -> None:
    backend = FakeBackend(capacity=2)
    async with SandboxPool(backend, max_concurrency=4, warm=2, **FAST) as pool:
        assert pool.metrics()["sandboxes_idle"] == 2
        # A session with its own limits cannot use the warm sandboxes; the service is full.
        async with pool.session(limits=Limits(timeout_s=3)) as session:
            assert (await session.run("ok")).status is Status.OK
            assert pool.open_sandboxes <= 2
        assert pool.metrics()["learned_cap"] == 2
