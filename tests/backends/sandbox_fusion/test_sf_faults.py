"""The ``sandbox_fusion`` backend behind a loopback fault injector in front of a real ``sandboxkit serve``.

What must hold: passing faults (5xx, 429, resets, stalls, SandboxError answers) end in the
correct result after retries; persistent ones end in an infrastructure error (never in a
wrong "program failed" result); a batch loses nothing; retries are not multiplied.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from sandboxkit.backends.sandbox_fusion import SandboxFusionBackend
from sandboxkit.errors import BackendUnavailable, InvalidRequest, RateLimited, SandboxError, Transient
from sandboxkit.models import Limits, RunRequest, RunResult, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.server.app import create_app
from support.serve import ServeProcess
from support.sf_fault_server import FaultServer, Plan

# Short timeouts keep a stall cheap: the HTTP read timeout is compile + run + grace = 2.5 s.
LIMITS = Limits(timeout_s=1, compile_timeout_s=1)
RETRIES = 4


def first_attempts(*faults: str) -> Plan:
    """The first attempts of every request get ``faults`` in order, later ones go through."""
    return lambda code, attempt: faults[attempt - 1] if attempt <= len(faults) else "ok"


def always(fault: str) -> Plan:
    return lambda code, attempt: fault


@asynccontextmanager
async def pool_behind(
    upstream: ServeProcess, plan: Plan, **pool_kw: object
) -> AsyncIterator[tuple[SandboxPool, FaultServer]]:
    async with FaultServer(upstream.url, plan, stall_s=6) as faults:
        backend = SandboxFusionBackend(url=faults.url + "/run_code", request_grace_s=0.5)
        pool_kw = {"max_concurrency": 16, "retries": RETRIES, "backoff_base_s": 0.01, "limits": LIMITS, **pool_kw}
        async with SandboxPool(backend, **pool_kw) as pool:  # type: ignore[arg-type]
            yield pool, faults
        await backend.aclose()


@pytest.mark.parametrize("fault", ["500", "502", "503", "504", "429", "sandbox_error", "garbage", "stall"])
async def test_one_fault_then_the_correct_result_via_a_pool_retry(sf_serve: ServeProcess, fault: str) -> None:
    async with pool_behind(sf_serve, first_attempts(fault)) as (pool, faults):
        result = await pool.run("print(6 * 7)")
        metrics = pool.metrics()
    assert result.status is Status.OK and result.stdout == "42\n"
    assert faults.attempts["print(6 * 7)"] == 2
    assert metrics["retries"] == 1  # one pool retry; the backend did not retry on its own


@pytest.mark.parametrize("fault", ["reset", "close"])
async def test_a_dropped_connection_is_resent_once_by_the_backend(sf_serve: ServeProcess, fault: str) -> None:
    async with pool_behind(sf_serve, first_attempts(fault)) as (pool, faults):
        result = await pool.run("print('again')")
        metrics = pool.metrics()
    assert result.stdout == "again\n"
    assert faults.attempts["print('again')"] == 2
    assert metrics["retries"] == 0  # absorbed by the one immediate resend, invisible to the pool


async def test_resets_on_every_attempt_end_in_transient(sf_serve: ServeProcess) -> None:
    async with pool_behind(sf_serve, always("reset")) as (pool, faults):
        with pytest.raises(Transient):
            await pool.run("print(1)")
    assert faults.attempts["print(1)"] == 2 * (RETRIES + 1)  # bounded: one resend per pool attempt


@pytest.mark.parametrize(
    ("fault", "error", "needle"),
    [("503", Transient, "503"), ("429", RateLimited, "429"), ("sandbox_error", Transient, "runner crashed")],
)
async def test_persistent_faults_are_infrastructure_errors_after_bounded_retries(
    sf_serve: ServeProcess, fault: str, error: type[SandboxError], needle: str
) -> None:
    async with pool_behind(sf_serve, always(fault)) as (pool, faults):
        with pytest.raises(error, match=needle) as caught:
            await pool.run("print(1)")
    assert faults.attempts["print(1)"] == RETRIES + 1
    assert caught.value.backend == "sandbox_fusion"
    if isinstance(caught.value, RateLimited):
        assert caught.value.retry_after == pytest.approx(0.05)


@pytest.mark.parametrize(("fault", "error"), [("422", InvalidRequest), ("404", BackendUnavailable)])
async def test_caller_and_configuration_errors_are_not_retried(
    sf_serve: ServeProcess, fault: str, error: type[SandboxError]
) -> None:
    async with pool_behind(sf_serve, always(fault)) as (pool, faults):
        with pytest.raises(error):
            await pool.run("print(1)")
    assert faults.attempts["print(1)"] == 1


async def test_a_faulty_batch_loses_nothing(sf_serve: ServeProcess) -> None:
    rotation = ["500", "502", "503", "504", "429", "reset", "sandbox_error", "garbage", "close"]

    def plan(code: str, attempt: int) -> str:
        if "doomed" in code:
            return "503"
        index = int(code.split("(")[1].split(")")[0])
        if attempt <= 2:  # two different faults for each request, then through
            return rotation[(index + attempt) % len(rotation)]
        return "ok"

    codes = [f"print({i})" if i % 10 != 7 else f"print({i})  # doomed" for i in range(50)]
    async with pool_behind(sf_serve, plan) as (pool, faults):
        results = await pool.run_many([RunRequest(code=c, limits=LIMITS) for c in codes])
    assert len(results) == len(codes)
    for i, (code, res) in enumerate(zip(codes, results, strict=True)):
        if "doomed" in code:
            assert isinstance(res, Transient), res
        else:
            assert isinstance(res, RunResult) and res.stdout == f"{i}\n", res
    assert faults.actions["ok"] == sum("doomed" not in c for c in codes)


async def test_connections_are_reused(sf_serve: ServeProcess) -> None:
    async with pool_behind(sf_serve, always("ok"), max_concurrency=1) as (pool, faults):
        for i in range(15):
            assert (await pool.run(f"print({i})")).stdout == f"{i}\n"
    assert faults.connections == 1


async def test_server_over_a_failing_sandbox_fusion_backend_answers_sandbox_error(sf_serve: ServeProcess) -> None:
    """Chained: sandboxkit serve -> sandbox_fusion backend -> a service that always answers 502."""
    async with FaultServer(sf_serve.url, always("502")) as faults:
        pool = SandboxPool(SandboxFusionBackend(url=faults.url), retries=1, backoff_base_s=0.01)
        app = create_app(pool, max_concurrency=4)
        async with app.router.lifespan_context(app):
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sk")
            async with client:
                resp = await client.post("/run_code", json={"code": "print(1)", "language": "python"})
        await pool.aclose()
    assert resp.status_code == 200
    assert resp.json()["status"] == "SandboxError"
    assert "502" in resp.json()["message"]
