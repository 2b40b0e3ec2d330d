"""Pool overhead per call on a no-op backend (target: <= 0.2 ms), side by side with direct calls.

Baseline: ``await sandbox.run(request)`` on the same no-op sandbox, no pool. The pool row
adds the cap, lease, liveness check, reset, metrics and give-back. Overhead = pool - direct,
measured in alternating rounds, median over rounds.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _noop import NoopBackend
from sandboxkit import RunRequest, SandboxPool
from sandboxkit.benchmarking import Row

TARGET_MS = 0.2


async def _measure(rounds: int, calls: int) -> tuple[list[float], list[float], list[float]]:
    backend = NoopBackend()
    sandbox = await backend.open()
    request = RunRequest(code="print(1)")
    direct, pooled, batch = [], [], []
    async with SandboxPool(backend, max_concurrency=64) as pool:
        await pool.run(request)  # warm: the first call builds schemas and the sandbox
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(calls):
                await sandbox.run(request)
            direct.append((time.perf_counter() - t) / calls)
            t = time.perf_counter()
            for _ in range(calls):
                await pool.run(request)
            pooled.append((time.perf_counter() - t) / calls)
            t = time.perf_counter()
            await pool.run_many([request] * calls)
            batch.append((time.perf_counter() - t) / calls)
    return direct, pooled, batch


def run(quick: bool = False) -> list[Row]:
    rounds, calls = (5, 500) if quick else (15, 2000)
    direct, pooled, batch = asyncio.run(_measure(rounds, calls))
    overhead = [p - d for p, d in zip(pooled, direct, strict=True)]
    med_overhead_ms = statistics.median(overhead) * 1000
    rows = [
        Row(
            "pool",
            "direct sandbox.run (baseline)",
            rounds * calls,
            statistics.median(direct) * 1000,
            max(direct) * 1000,
            throughput=1 / statistics.median(direct),
        ),
        Row(
            "pool",
            "pool.run, sequential",
            rounds * calls,
            statistics.median(pooled) * 1000,
            max(pooled) * 1000,
            throughput=1 / statistics.median(pooled),
            baseline="direct",
            ratio=statistics.median(direct) / statistics.median(pooled),
        ),
        Row(
            "pool",
            "pool overhead per call",
            rounds,
            med_overhead_ms,
            max(overhead) * 1000,
            target=f"<= {TARGET_MS} ms",
            met=med_overhead_ms <= TARGET_MS,
        ),
        Row(
            "pool",
            "pool.run_many, 64 in flight",
            rounds * calls,
            statistics.median(batch) * 1000,
            max(batch) * 1000,
            throughput=1 / statistics.median(batch),
        ),
    ]
    return rows
