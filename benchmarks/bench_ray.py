"""The cluster-wide Ray limiter: cost per call, and throughput of 8 workers sharing one cap.

Latency rows (``acquire_call`` + ``release_call`` in a loop, one process):

* the local limiter (baseline);
* the Ray limiter with its lease cache (a released slot is reused while nobody else waits);
* the Ray limiter forced through the actor on every call (``linger_s=0``): one round trip
  to the limiter actor per acquire, the release sent without waiting. Target: <= 1 ms p50;
  shown next to a bare async actor round trip on the same machine, the floor for any design
  that asks an actor;
* a burst of 16 acquires at once through the actor: one batched message for all of them.

Throughput rows: a backend whose runs sleep 50 ms, cap 16, so the cap dominates. One
process with the local limiter (baseline) against 8 Ray worker actors sharing the cap
through the limiter actor; target >= 90% of the baseline. Measured with the sandbox cap out
of the way (each worker keeps its warm sandboxes), at twice the call cap, and equal to the
call cap (the pool's default), where sandbox slots must keep moving between workers.

Starts a local Ray (``ray.init(num_cpus=4)``) unless one is running, and shuts it down.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sandboxkit import Backend, Capabilities, ExecResult, Limits, RunRequest, RunResult, Sandbox, SandboxPool, Status
from sandboxkit.benchmarking import Row, row_from_samples
from sandboxkit.limiter import LocalLimiter

TARGET_MS = 1.0
CAP = 16
BURST = 16
SLEEP_S = 0.05


class _SleepSandbox(Sandbox):
    backend_name = "bench-sleep"

    def __init__(self) -> None:
        self.id = f"sleep-{os.getpid()}-{id(self)}"

    async def run(self, request: RunRequest) -> RunResult:
        await asyncio.sleep(SLEEP_S)
        return RunResult(status=Status.OK, exit_code=0)

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        return ExecResult(status=Status.OK, exit_code=0)

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        return None

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return {}

    async def alive(self) -> bool:
        return True

    async def reset(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class _SleepBackend(Backend):
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python"}))

    async def open(self, limits: Limits | None = None) -> _SleepSandbox:
        return _SleepSandbox()


class _Echo:
    """The floor: a bare async-actor round trip, no limiter logic."""

    async def ping(self) -> None:
        return None


class _Worker:
    """A Ray actor owning one pool, like one of verl's reward workers."""

    def __init__(self, name: str, pool: dict[str, Any]) -> None:
        self.pool = SandboxPool(_SleepBackend(name), **pool)

    async def run_many(self, n: int, start_at: float) -> tuple[float, float, int]:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        started = time.time()
        results = await self.pool.run_many([{"code": "x"}] * n)
        return started, time.time(), sum(1 for r in results if isinstance(r, RunResult))

    async def close(self) -> None:
        await self.pool.aclose()


async def _loop(limiter: Any, n: int) -> list[float]:
    samples = []
    for i in range(n):
        t = time.perf_counter()
        await limiter.acquire_call(i)
        limiter.release_call(i)
        samples.append(time.perf_counter() - t)
    return samples


async def _burst(limiter: Any, size: int, rounds: int) -> list[float]:
    """``size`` calls acquire at once, then release: amortized cost per call (batched messages)."""
    samples = []
    for r in range(rounds):
        tokens = [(r, i) for i in range(size)]
        t = time.perf_counter()
        await asyncio.gather(*(limiter.acquire_call(tok) for tok in tokens))
        for tok in tokens:
            limiter.release_call(tok)
        samples.append((time.perf_counter() - t) / size)
        await asyncio.sleep(0.01)  # let the releases reach the actor before the next burst
    return samples


async def _pings(echo: Any, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        await echo.ping.remote()
        samples.append(time.perf_counter() - t)
    return samples


async def _latencies(ray: Any, n: int) -> dict[str, list[float]]:
    from sandboxkit.distributed import RayLimiter, shutdown_limiter

    echo = ray.remote(_Echo).options(num_cpus=0).remote()
    local = LocalLimiter(CAP)
    cached = RayLimiter(CAP, name="bench-ray-cached")
    direct = RayLimiter(CAP, name="bench-ray-direct", linger_s=0)
    try:
        await _loop(cached, 20)  # connect, warm up
        await _loop(direct, 20)
        await _pings(echo, 20)
        out: dict[str, list[float]] = {"local": [], "cached": [], "direct": [], "floor": [], "burst": []}
        for _ in range(5):  # alternate, so load changes on this machine hit all three alike
            out["local"] += await _loop(local, n // 5)
            out["cached"] += await _loop(cached, n // 5)
            out["direct"] += await _loop(direct, n // 5)
            out["floor"] += await _pings(echo, n // 5)
            out["burst"] += await _burst(direct, BURST, max(2, n // 500))
        return out
    finally:
        await cached.aclose()
        await direct.aclose()
        shutdown_limiter("bench-ray-cached")
        shutdown_limiter("bench-ray-direct")


def _throughput(ray: Any, workers: list[Any], per_worker: int) -> float:
    start_at = time.time() + 0.3
    out = ray.get([w.run_many.remote(per_worker, start_at) for w in workers])
    assert all(done == per_worker for _, _, done in out)
    return per_worker * len(workers) / (max(f for _, f, _ in out) - min(s for s, _, _ in out))


def _throughputs(ray: Any, n_workers: int, per_worker: int, repeats: int) -> dict[str, float]:
    from sandboxkit.distributed import limiter_name, shutdown_limiter

    actor = ray.remote(_Worker).options(num_cpus=0)
    out: dict[str, float] = {}
    cases = [
        ("local", {"max_concurrency": CAP, "max_sandboxes": n_workers * CAP, "limiter": "local"}, 1),
        ("ray", {"max_concurrency": CAP, "max_sandboxes": n_workers * CAP, "limiter": "ray"}, n_workers),
        ("ray-sandbox-2x", {"max_concurrency": CAP, "max_sandboxes": 2 * CAP, "limiter": "ray"}, n_workers),
        ("ray-sandbox-cap", {"max_concurrency": CAP, "limiter": "ray"}, n_workers),
    ]
    for case, pool, count in cases:
        name = f"bench-{case}"
        workers = [actor.remote(name, pool) for _ in range(count)]
        calls = per_worker * n_workers // count
        _throughput(ray, workers, calls)  # warm up: start processes, connect, open sandboxes
        out[case] = max(_throughput(ray, workers, calls) for _ in range(repeats))
        ray.get([w.close.remote() for w in workers])
        for w in workers:
            ray.kill(w)
        shutdown_limiter(limiter_name(name))
    return out


def run(quick: bool = False) -> list[Row]:
    import ray

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        lat = asyncio.run(_latencies(ray, 500 if quick else 3000))
        n_workers, per_worker, repeats = (4, 40, 1) if quick else (8, 40, 3)
        tp = _throughputs(ray, n_workers, per_worker, repeats)
    finally:
        if started_ray:
            ray.shutdown()
    base = statistics.median(lat["local"])
    rows = [
        row_from_samples("ray", "acquire+release: local limiter (baseline)", lat["local"]),
        row_from_samples(
            "ray",
            "acquire+release: Ray limiter, lease cache hit",
            lat["cached"],
            baseline="local",
            ratio=base / statistics.median(lat["cached"]),
        ),
    ]
    direct = row_from_samples(
        "ray",
        "acquire+release: Ray limiter, through the actor every call",
        lat["direct"],
        baseline="local",
        ratio=base / statistics.median(lat["direct"]),
        target=f"<= {TARGET_MS:g} ms p50",
    )
    direct.met = direct.median_ms <= TARGET_MS
    direct.extra["overhead_over_bare_round_trip_ms"] = direct.median_ms - statistics.median(lat["floor"]) * 1000
    rows.append(direct)
    rows.append(row_from_samples("ray", "bare async Ray actor round trip (the floor)", lat["floor"]))
    rows.append(
        row_from_samples(
            "ray",
            f"acquire+release: Ray limiter, burst of {BURST} at once, per call (no cache)",
            lat["burst"],
            baseline="local",
            ratio=base / statistics.median(lat["burst"]),
        )
    )
    ideal = CAP / SLEEP_S
    rows.append(Row("ray", f"1 process, cap {CAP}, 50 ms runs (baseline)", per_worker * n_workers, 0, 0, tp["local"]))
    labels = (
        ("ray", f"sandbox cap {n_workers * CAP} (no sandbox pressure)"),
        ("ray-sandbox-2x", f"sandbox cap {2 * CAP}"),
        ("ray-sandbox-cap", f"sandbox cap {CAP} = call cap (pool default)"),
    )
    for case, label in labels:
        ratio = tp[case] / tp["local"]
        rows.append(
            Row(
                "ray",
                f"{n_workers} Ray workers sharing cap {CAP}, {label}",
                per_worker * n_workers,
                0,
                0,
                tp[case],
                baseline="1 process",
                ratio=ratio,
                target=">= 0.9x one process",
                met=ratio >= 0.9,
                extra={"ideal_per_s": ideal},
            )
        )
    return rows
