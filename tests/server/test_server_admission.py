"""Admission control and infrastructure errors, on the failure-injecting fake backend.

The fake backend's program text is its behaviour (``sleep:S``, ``transient:N``, ``crash``, ``bug``),
so these tests state exactly what the backend did and check what the HTTP client saw.
"""

from __future__ import annotations

import asyncio

from sandboxkit.pool import SandboxPool
from sandboxkit.testing import FakeBackend
from support.serve import AppClient


def body(code: str) -> dict[str, object]:
    return {"code": code, "language": "python"}


async def test_runs_in_flight_never_exceed_max_concurrency(app_client: AppClient) -> None:
    backend = FakeBackend()
    async with app_client(backend, max_concurrency=2, queue_timeout_s=30) as client:
        replies = await asyncio.gather(*(client.post("/run_code", json=body("sleep:0.2")) for _ in range(8)))
        stats = (await client.get("/v1/stats")).json()
    assert [r.status_code for r in replies] == [200] * 8
    assert all(r.json()["status"] == "Success" for r in replies)
    assert backend.peak_in_flight == 2
    assert stats["gate"]["admitted"] == 8 and stats["gate"]["in_flight"] == 0


async def test_queue_wait_past_the_timeout_is_504_and_the_slot_holder_still_finishes(app_client: AppClient) -> None:
    async with app_client(FakeBackend(), max_concurrency=1, queue_timeout_s=0.3) as client:
        holder = asyncio.create_task(client.post("/run_code", json=body("sleep:1.5")))
        await asyncio.sleep(0.2)
        waiter = await client.post("/run_code", json=body("ok"))
        assert waiter.status_code == 504
        assert "no run slot freed up within 0.3s" in waiter.json()["detail"]
        assert (await holder).json()["status"] == "Success"
        assert (await client.post("/run_code", json=body("ok"))).status_code == 200  # slot was given back
        stats = (await client.get("/v1/stats")).json()["gate"]
    assert stats["rejected_queue_timeout"] == 1 and stats["waiting"] == 0


async def test_full_queue_is_504_at_once(app_client: AppClient) -> None:
    async with app_client(FakeBackend(), max_concurrency=1, queue_timeout_s=30, max_queue=1) as client:
        holder = asyncio.create_task(client.post("/run_code", json=body("sleep:1")))
        await asyncio.sleep(0.1)
        queued = asyncio.create_task(client.post("/run_code", json=body("ok")))
        await asyncio.sleep(0.1)
        overflow = await client.post("/run_code", json=body("ok"))
        assert overflow.status_code == 504 and "already inside" in overflow.json()["detail"]
        assert overflow.headers["retry-after"] == "1"
        assert (await holder).status_code == 200 and (await queued).status_code == 200


async def test_infrastructure_failures_are_sandbox_error_with_http_200(app_client: AppClient) -> None:
    async with app_client(SandboxPool(FakeBackend(), max_concurrency=4, retries=1, backoff_base_s=0.01)) as client:
        persistent = await client.post("/run_code", json=body("transient:99"))
        crash = await client.post("/run_code", json=body("crash"))
        bug = await client.post("/run_code", json=body("bug"))
        recovered = await client.post("/run_code", json=body("transient:1"))  # the pool retried it once
        model_failure = await client.post("/run_code", json=body("fail"))
    for resp, needle in ((persistent, "injected transient"), (crash, "injected crash"), (bug, "injected backend bug")):
        assert resp.status_code == 200
        assert resp.json()["status"] == "SandboxError"
        assert needle in resp.json()["message"]
        assert resp.json()["run_result"] is None
    assert recovered.json()["status"] == "Success"
    assert model_failure.json()["status"] == "Failed"  # a program's failure is never a SandboxError


async def test_a_pool_passed_in_is_used_and_not_closed(app_client: AppClient) -> None:
    pool = SandboxPool(FakeBackend(), max_concurrency=2)
    async with app_client(pool) as client:
        assert (await client.post("/run_code", json=body("ok"))).json()["run_result"]["stdout"] == "ok"
    assert not pool.closed
    await pool.aclose()
