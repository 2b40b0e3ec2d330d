"""Stateful Python kernels (issue 17): a one-line cell's round trip, 64 live kernels, memory per idle kernel.

Targets: p50 of a one-line cell (``session.python("x = 1")``, the whole call a tool adapter
makes: pool, session lock, framing, the in-sandbox supervisor and worker) <= 3 ms on subprocess
and <= 10 ms on Docker; 64 kernels alive at once; PSS per idle kernel quoted.

* Side by side with the baseline a user has without kernels: ``session.run("x = 1")`` on the
  same sandbox (a warm, forked program run, which keeps no state). Cells and runs alternate in
  short rounds and the medians over rounds are compared, because the machine is shared.
* 64 live kernels: 64 subprocess sandboxes, each kernel started by a first cell (start time of
  a kernel quoted), then one cell in every kernel, 8 at a time. Each kernel's processes are
  found from its host side and their PSS (``/proc/PID/smaps_rollup``) summed: bubblewrap's two
  processes, the supervisor and the worker. PSS shares pages fairly among the 64, so the sum
  divided by 64 is what one more idle kernel costs.
* Docker: the same cell on one container (skipped when no engine is reachable), and the PSS
  of its kernel's supervisor and worker.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from sandboxkit import SandboxPool
from sandboxkit.benchmarking import Row, closed_loop, row_from_samples
from sandboxkit.kernel import process_tree
from sandboxkit.models import Limits

BENCH = "kernel"
CELL = "x = 1"
TARGETS_MS = {"subprocess": 3.0, "docker": 10.0}
LIMITS = Limits(timeout_s=10, memory_mb=512)
KERNELS = 64


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _kernel_root(sandbox: Any) -> int | None:
    """Host pid of the top of a sandbox's kernel (bwrap on subprocess, the supervisor on Docker)."""
    link = getattr(getattr(sandbox, "_kernel", None), "_link", None)
    proc = getattr(link, "proc", None)
    if proc is not None:
        return int(proc.pid)
    host_pid = getattr(link, "host_pid", None)
    return (host_pid() or None) if host_pid is not None else None


async def _side_by_side(backend: str, rounds: int, per_round: int) -> dict[str, Any]:
    async with SandboxPool(backend, limits=LIMITS, max_concurrency=2) as pool, pool.session() as session:
        assert (await session.python(CELL)).ok
        await session.run(CELL)
        cells: list[float] = []
        runs: list[float] = []
        for _ in range(rounds):
            for _ in range(per_round):
                t = time.perf_counter()
                result = await session.python(CELL)
                cells.append(time.perf_counter() - t)
                assert result.ok, result
            for _ in range(per_round):
                t = time.perf_counter()
                ran = await session.run(CELL)
                runs.append(time.perf_counter() - t)
                assert ran.status.value == "ok", ran
        entry = session._entry
        root = _kernel_root(entry.sandbox) if entry is not None else None
        pss = sum(_pss_kb(p) for p in process_tree(root)) if root else 0
        return {"cells": cells, "runs": runs, "pss_kb": pss}


async def _many(n: int) -> dict[str, Any]:
    from sandboxkit.backends.subprocess import SubprocessBackend

    backend = SubprocessBackend()
    sandboxes = []
    try:
        opened = await asyncio.gather(*(backend.open(LIMITS) for _ in range(n)))
        sandboxes = list(opened)
        starts: list[float] = []
        gate = asyncio.Semaphore(8)

        async def start(sb: Any) -> None:
            async with gate:
                t = time.perf_counter()
                result = await (await sb.open_kernel()).run(CELL)
                starts.append(time.perf_counter() - t)
                assert result.ok, result

        await asyncio.gather(*(start(sb) for sb in sandboxes))

        async def one(i: int) -> None:
            result = await (await sandboxes[i % n].open_kernel()).run("x += 1")
            assert result.ok, result

        latencies, rps = await closed_loop(one, 8, n * 4)
        live = sum(1 for sb in sandboxes if sb._kernel is not None and sb._kernel.running)
        roots = [r for r in (_kernel_root(sb) for sb in sandboxes) if r]
        pss = sum(_pss_kb(p) for r in roots for p in process_tree(r))
        return {"starts": starts, "latencies": latencies, "rps": rps, "live": live, "pss_kb": pss / max(len(roots), 1)}
    finally:
        await asyncio.gather(*(sb.close() for sb in sandboxes), return_exceptions=True)
        await backend.aclose()


def _docker_usable() -> bool:
    try:
        from sandboxkit.backends.docker import DockerBackend

        return DockerBackend.availability().usable
    except Exception:
        return False


def run(quick: bool = False) -> list[Row]:
    """Measure and return the rows (``sandboxkit bench kernel``)."""
    rounds, per_round = (5, 20) if quick else (20, 50)
    load = os.getloadavg()[0]
    rows: list[Row] = []
    backends = ["subprocess"] + (["docker"] if _docker_usable() else [])
    for name in backends:
        data = asyncio.run(_side_by_side(name, rounds, per_round))
        base = row_from_samples(BENCH, f"{name}: session.run('x = 1') (warm program, no state)", data["runs"])
        cell = row_from_samples(
            BENCH,
            f"{name}: session.python('x = 1') (one-line cell)",
            data["cells"],
            baseline="session.run",
            extra={"kernel_pss_mb": round(data["pss_kb"] / 1024, 2), "load_1m": round(load, 2)},
        )
        cell.ratio = base.median_ms / cell.median_ms if cell.median_ms else None
        cell.target = f"p50 <= {TARGETS_MS[name]:g} ms"
        cell.met = cell.median_ms <= TARGETS_MS[name]
        rows += [base, cell]
    many = asyncio.run(_many(KERNELS))
    rows.append(
        row_from_samples(
            BENCH,
            f"subprocess: start a kernel (first cell), {KERNELS} sandboxes, 8 at a time",
            many["starts"],
        )
    )
    live = row_from_samples(
        BENCH,
        f"subprocess: one cell in each of {KERNELS} live kernels, 8 in flight",
        many["latencies"],
        throughput=many["rps"],
        extra={
            "live_kernels": many["live"],
            "pss_per_idle_kernel_mb": round(many["pss_kb"] / 1024, 2),
            "load_1m": round(os.getloadavg()[0], 2),
        },
    )
    live.target = f"{KERNELS} kernels alive at once; PSS per idle kernel quoted"
    live.met = many["live"] == KERNELS
    rows.append(live)
    return rows
