"""SandboxPool semantics, proven against the scriptable failure-injecting backend (sandboxkit.testing.FakeBackend)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from sandboxkit import (
    BackendNotFound,
    BackendUnavailable,
    DeadlineExceeded,
    InvalidRequest,
    PoolClosed,
    RateLimited,
    RunResult,
    SandboxCrashed,
    SandboxPool,
    Status,
    Transient,
)
from sandboxkit.testing import FakeBackend
from support.marks import missing

FAST = {"backoff_base": 0.001, "backoff_max": 0.01}


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
    async with SandboxPool(backend, retries=2, backoff_base=0.0001, backoff_max=1.0) as pool:
        started = time.monotonic()
        result = await pool.run("ratelimit:1")
    assert result.status is Status.OK
    assert time.monotonic() - started >= 0.01  # retry_after of the injected 429


async def test_model_failures_are_results_and_never_retried() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend, retries=5, **FAST) as pool:
        result = await pool.run("fail")
    assert result.status is Status.FAILED and result.exit_code == 1
    assert backend.attempts["fail"] == 1


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
    backend = FakeBackend(close_delay=0.01)
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


async def test_closed_pool_refuses_calls() -> None:
    pool = SandboxPool(FakeBackend())
    await pool.aclose()
    with pytest.raises(PoolClosed):
        await pool.run("ok")


async def test_rate_limited_open_penalizes_the_bucket() -> None:
    backend = FakeBackend(open_failures=1, open_error=lambda msg: RateLimited(msg, retry_after=0.05))  # type: ignore[arg-type]
    async with SandboxPool(backend, creation_rate=100, retries=2, backoff_base=0.0001) as pool:
        started = time.monotonic()
        await pool.run("ok")
    assert time.monotonic() - started >= 0.04


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
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while len(list(markers.iterdir())) < 6:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the batch never started"
            time.sleep(0.05)
        os.kill(proc.pid, sig)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert list(markers.iterdir()) == [], "sandboxes left open after the signal"


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
    backend = FakeBackend(open_delay=0.001)
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


async def test_a_custom_limiter_states_what_it_does_instead_of_being_probed() -> None:
    from sandboxkit.limiter import Limiter, LocalLimiter

    class Counting(LocalLimiter):
        """A limiter that inherits the protocol's defaults and records the pool's notifications."""

        def __init__(self) -> None:
            super().__init__(4, 4, creation_rate=100)
            self.penalties: list[float] = []
            self.attached = 0

        def penalize_creation(self, seconds: float) -> None:
            self.penalties.append(seconds)
            super().penalize_creation(seconds)

        def attach(self, on_capacity: object, reclaim_idle: object) -> None:
            self.attached += 1

    limiter = Counting()
    backend = FakeBackend(open_failures=1, open_error=lambda msg: RateLimited(msg, retry_after=0.05))  # type: ignore[arg-type]
    async with SandboxPool(backend, limiter=limiter, retries=2, backoff_base=0.0001) as pool:
        assert (await pool.run("ok")).status is Status.OK
    assert limiter.attached == 1
    assert limiter.penalties == [0.05], "a 429 on creation reaches the limiter once, with Retry-After"

    class Bare(Limiter):  # only the required methods: the notifications fall back to the no-op defaults
        def __init__(self) -> None:
            self.inner = LocalLimiter(2, 2)

        async def acquire_call(self, token: object) -> None:
            await self.inner.acquire_call(token)

        def release_call(self, token: object) -> None:
            self.inner.release_call(token)

        async def try_acquire_sandbox(self, token: object) -> bool:
            return await self.inner.try_acquire_sandbox(token)

        def release_sandbox(self, token: object) -> None:
            self.inner.release_sandbox(token)

        async def creation_token(self) -> None:
            await self.inner.creation_token()

        def statistics(self):  # type: ignore[no-untyped-def]
            return self.inner.statistics()

        async def aclose(self) -> None:
            await self.inner.aclose()

    ratelimited = FakeBackend(open_failures=1, open_error=lambda msg: RateLimited(msg, retry_after=0.01))  # type: ignore[arg-type]
    async with SandboxPool(ratelimited, limiter=Bare(), retries=2, backoff_base=0.0001) as pool:
        assert (await pool.run("ok")).status is Status.OK
    with pytest.raises(InvalidRequest, match=r"limiter must be .*Limiter.*got <object"):
        SandboxPool(FakeBackend(), limiter=object())  # type: ignore[arg-type]
