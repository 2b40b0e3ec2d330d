"""SandboxPool semantics, proven against the scriptable failure-injecting backend (sandboxkit.testing.FakeBackend)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import textwrap
from pathlib import Path

import anyio
import pytest

from sandboxkit import (
    BackendNotFound,
    InvalidRequest,
    PoolClosed,
    RunResult,
    SandboxCrashed,
    SandboxPool,
    Status,
)
from sandboxkit.testing import FakeBackend
from support.marks import missing
from support.procs import interrupt_when_ready

FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


async def test_calls_in_flight_never_exceed_the_cap_under_1000_concurrent_calls() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, max_concurrency=16, max_sandboxes=64, **FAST) as pool:
        results = await pool.run_many([{"code": "sleep:0.002"}] * 1000)
    assert all(isinstance(r, RunResult) and r.status is Status.OK for r in results)
    assert backend.peak_in_flight <= 16
    assert backend.peak_in_flight >= 8, "the pool should actually run calls concurrently"
    assert backend.peak_live <= 16
    assert not backend.live


async def test_creations_never_exceed_the_token_bucket() -> None:
    rate, burst = 40.0, 3
    backend = FakeBackend()
    # max_uses=1 forces a new sandbox for every call, so every call takes a creation token.
    async with SandboxPool(backend, max_concurrency=8, creation_rate=rate, creation_burst=burst, max_uses=1) as pool:
        await pool.run_many([{"code": "ok"}] * 30)
    times = backend.created_at
    assert len(times) == 30
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            allowed = burst + rate * (times[j] - times[i]) + 1e-6
            assert j - i + 1 <= allowed + 0.5, f"creations {i}..{j} exceeded the bucket"


async def test_model_failures_are_results_and_never_retried() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, retries=5, **FAST) as pool:
        result = await pool.run("fail")
    assert result.status is Status.FAILED and result.exit_code == 1
    assert backend.attempts["fail"] == 1


async def test_run_many_returns_every_result_once_in_order() -> None:
    backend = FakeBackend()
    codes = ["ok", "sleep:0.02", "fail", "crash", "sleep:0.01", "bug", "ok"]
    items: list[dict[str, object]] = [{"code": c} for c in codes]
    items.insert(3, {"code": "x", "language": "cobol"})
    async with SandboxPool(backend, max_concurrency=4, retries=0) as pool:
        results = await pool.run_many(items)
    assert len(results) == len(items)
    kinds = [r.stdout if isinstance(r, RunResult) else type(r).__name__ for r in results]
    assert kinds == [
        "ok",
        "sleep:0.02",
        "fail",
        "InvalidRequest",
        "SandboxCrashed",
        "sleep:0.01",
        "SandboxCrashed",
        "ok",
    ]
    assert "bug" in str(results[6]) and "report it" in str(results[6])


async def test_cancelled_run_many_leaves_no_sandbox_open() -> None:
    backend = FakeBackend(close_delay_s=0.01)
    pool = SandboxPool(backend, max_concurrency=8)
    async with pool:
        task = asyncio.ensure_future(pool.run_many([{"code": "sleep:30"}] * 20))
        while backend.in_flight < 8:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert backend.in_flight == 0
        assert not backend.live, "sandboxes interrupted mid-call must be closed, even under cancellation"
    assert pool.open_sandboxes == 0


async def test_bad_input_is_rejected_before_anything_starts() -> None:
    with pytest.raises(BackendNotFound, match=r"installed backends: .*subprocess"):
        SandboxPool("no-such-backend")
    backend = FakeBackend()
    async with SandboxPool(backend) as pool:
        with pytest.raises(InvalidRequest, match="unknown language 'cobol'"):
            await pool.run("x", language="cobol")
        with pytest.raises(InvalidRequest, match="timeout"):
            await pool.run("x", timeout=-1)
        with pytest.raises(InvalidRequest, match=r"\.\."):
            await pool.run("x", files={"../etc/passwd": "x"})
        with pytest.raises(InvalidRequest, match=r"\.\."):
            await pool.run("x", fetch_files=["a/../../b"])
        with pytest.raises(InvalidRequest, match="cannot run 'go'"):
            await pool.run("x", language="go")
    assert backend.opens_attempted == 0
    with pytest.raises(InvalidRequest):
        SandboxPool(backend, max_concurrency=0)


async def test_closed_pool_refuses_calls() -> None:
    pool = SandboxPool(FakeBackend())
    await pool.aclose()
    with pytest.raises(PoolClosed):
        await pool.run("ok")


def test_metrics_dict() -> None:
    async def go() -> dict[str, object]:
        async with SandboxPool(FakeBackend(), retries=0) as pool:
            await pool.run("ok")
            await pool.run("fail")
            with pytest.raises(SandboxCrashed):
                await pool.run("crash")
            return pool.metrics()

    m = anyio.run(go)
    assert m["calls"] == 3
    assert m["statuses"] == {"ok": 1, "failed": 1}
    assert m["errors"] == {"sandbox_crashed": 1}
    for key in ("queue_wait_s", "run_time_s", "latency_s"):
        assert set(m[key]) == {"mean", "p50", "p99"}  # type: ignore[arg-type]


_BATCH_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from sandboxkit.testing import FakeBackend
    from sandboxkit import SandboxPool

    async def main():
        backend = FakeBackend(marker_dir={markers!r})
        async with SandboxPool(backend, max_concurrency=6) as pool:
            await pool.run_many([{{"code": "sleep:60"}}] * 30)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_batch_leaves_no_sandbox_open(tmp_path: Path, sig: signal.Signals) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    script = _BATCH_SCRIPT.format(tests=str(Path(__file__).parents[1]), markers=str(markers))
    interrupt_when_ready(script, None, lambda: len(list(markers.iterdir())) >= 6, timeout_s=30, sig=sig)
    assert list(markers.iterdir()) == [], "sandboxes left open after the signal"


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "import time\ntime.sleep(30)\n"),
        ("bash", "sleep 30\n"),
        ("cpp", "#include <unistd.h>\nint main() { sleep(30); return 0; }\n"),  # compile-once session path
    ],
)
async def test_the_judge_scores_a_pool_deadline_as_no_reward_not_as_a_timeout(language: str, code: str) -> None:
    from sandboxkit.judge import grade

    if language == "cpp" and shutil.which("g++") is None:
        missing("g++ is not installed")
    tests = [{"input": "1\n", "output": "1\n"}, {"input": "2\n", "output": "2\n"}]
    # Each case may run 60 s, but the pool gives the whole call 3 s: the sandbox was too slow, the program
    # did nothing wrong by its own limits.
    async with SandboxPool("subprocess", max_concurrency=2, deadline_s=3.0) as pool:
        verdict = await grade(pool, code, tests, language=language, timeout_s=60)
    assert verdict.status == "infra_error", verdict
    assert verdict.reward is None
    assert "deadline_exceeded" in (verdict.error or "")


async def test_exec_takes_a_cwd_checked_by_the_sandbox_as_a_session_s_does() -> None:
    # One keyword list for pool.exec and session.exec: a cwd reaches the sandbox from either.
    async with SandboxPool(FakeBackend(), **FAST) as pool:
        assert (await pool.exec("ok", cwd="sub")).status is Status.OK
        with pytest.raises(InvalidRequest, match=r"contains '\.\.'"):
            await pool.exec("ok", cwd="../outside")
        async with pool.session() as session:
            with pytest.raises(InvalidRequest, match=r"contains '\.\.'"):
                await session.exec("ok", cwd="../outside")
