"""A process that runs a batch through ``SandboxPool("docker")``; the leak tests kill it in various ways.

Usage: ``python leak_child.py slow|quick``. Its containers carry the labels in
``SANDBOXKIT_DOCKER_LABELS`` (set by the test), so the test counts only this process's containers.
"""

from __future__ import annotations

import asyncio
import sys

from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool


async def main(mode: str) -> None:
    limits = Limits(timeout_s=120, memory_mb=128)
    code = "import time\ntime.sleep(100)" if mode == "slow" else "print(sum(range(10)))"
    async with SandboxPool("docker", max_concurrency=3, limits=limits) as pool:
        results = await pool.run_many([{"code": code} for _ in range(6)])
    print("DONE", [getattr(r, "stdout", r) for r in results], flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
