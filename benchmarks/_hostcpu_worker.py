"""One measurement of ``bench_hostcpu``, run in a fresh interpreter with the tree under test first on ``PYTHONPATH``.

A separate process per measurement, because two sandboxkit trees cannot share one interpreter and
``getrusage(RUSAGE_SELF)`` must see only the host side of one pool. Prints one JSON object.

Usage: ``python _hostcpu_worker.py CONCURRENCY SECONDS``
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

from _scale_workers import print_loop  # this script's folder is on sys.path (run as a file)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(concurrency: int, seconds: float) -> dict[str, Any]:
    import sandboxkit
    from sandboxkit import RunRequest, SandboxPool

    request = RunRequest(code="print(1)")
    async with SandboxPool("subprocess", max_concurrency=concurrency, warm=concurrency) as pool:
        await asyncio.gather(*(pool.run(request) for _ in range(4 * concurrency)))  # every server warm
        cpu, began = _cpu_s(), time.perf_counter()
        latencies, wrong = await print_loop(pool, request, concurrency, seconds)
        cpu, wall = _cpu_s() - cpu, time.perf_counter() - began
    return {
        "tree": os.path.dirname(os.path.dirname(sandboxkit.__file__)),
        "runs": len(latencies),
        "runs_per_s": len(latencies) / wall,
        "host_cpu_ms_per_run": cpu / len(latencies) * 1000,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000,
        "wrong": wrong,
        "load_avg": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_measure(int(sys.argv[1]), float(sys.argv[2])))))
