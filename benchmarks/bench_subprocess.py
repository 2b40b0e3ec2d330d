"""The subprocess backend against the naive ``subprocess.run([python3, "-c", code])``, side by side.

Targets (issue 3): >= 500 runs/s of ``print(1)`` on 2 cores and >= 4.5x the plain path at the
same concurrency; p50 <= 3 ms at concurrency 1; memory per warm slot <= 5 MB.

* The baseline uses the same interpreter the sandbox runs (``python3`` on the sandbox PATH),
  at the same concurrency (threads, since ``subprocess.run`` blocks).
* The warm rows go through the full isolation (bubblewrap namespaces, private uid, cgroups,
  rlimits, output draining) that this machine allows; ``missing`` lists what it does not.
* Memory per warm slot is the fork server plus its two bwrap processes, read from
  ``/proc/PID/smaps_rollup``: USS (private pages, what one more slot really costs) and PSS.
* Plain and warm rounds alternate, and the medians over rounds are compared, because the
  machine is shared and absolute numbers drift.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from sandboxkit import RunRequest, RunResult, SandboxPool
from sandboxkit.backends.subprocess import SubprocessBackend, SubprocessSandbox
from sandboxkit.backends.subprocess._workspace import SANDBOX_PATH
from sandboxkit.benchmarking import Row, closed_loop, row_from_samples

BENCH = "subprocess"
CODE = "print(1)"
TARGET_RPS = 500.0
TARGET_RATIO = 4.5
TARGET_P50_MS = 3.0
TARGET_SLOT_MB = 5.0


def _plain(python: str, concurrency: int, n: int) -> tuple[list[float], float]:
    """``n`` naive runs at ``concurrency``: per-run latencies and overall runs/s."""

    def one() -> float:
        t = time.perf_counter()
        out = subprocess.run([python, "-c", CODE], capture_output=True, check=True)
        assert out.stdout == b"1\n"
        return time.perf_counter() - t

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        lat = list(ex.map(lambda _: one(), range(n)))
    return lat, n / (time.perf_counter() - started)


async def _warm(sandboxes: list[SubprocessSandbox], n: int) -> tuple[list[float], float]:
    """``n`` runs spread over the sandboxes (one in flight per sandbox)."""
    request = RunRequest(code=CODE)

    async def one(i: int) -> None:
        _check(await sandboxes[i].run(request))

    return await closed_loop(one, len(sandboxes), n)


async def _pooled(pool: SandboxPool, concurrency: int, n: int) -> tuple[list[float], float]:
    async def one(_: int) -> None:
        _check(await pool.run(CODE))

    return await closed_loop(one, concurrency, n)


def _check(result: RunResult) -> None:
    assert result.stdout == "1\n", result


def _rollup(pid: int) -> tuple[int, int]:
    """(USS, PSS) of a process in KiB."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields["Private_Clean"] + fields["Private_Dirty"], fields["Pss"]


def _slot_memory(sandboxes: list[SubprocessSandbox]) -> tuple[float, float]:
    """Mean (USS, PSS) in MB of one warm slot's processes: the fork server and its bwrap parents."""
    uss_total = pss_total = 0
    for sb in sandboxes:
        server = sb._server
        assert server is not None and server.proc is not None and server.server_pid is not None
        pids = {server.proc.pid, server.server_pid}
        with open(f"/proc/{server.server_pid}/stat") as f:
            pids.add(int(f.read().rsplit(")", 1)[1].split()[1]))  # bwrap's init (or ourselves, below)
        pids.discard(os.getpid())
        for pid in pids:
            uss, pss = _rollup(pid)
            uss_total += uss
            pss_total += pss
    return uss_total / len(sandboxes) / 1024, pss_total / len(sandboxes) / 1024


def _rows(quick: bool) -> list[Row]:
    python = shutil.which("python3", path=SANDBOX_PATH) or "python3"
    rounds, per_round = (3, 60) if quick else (5, 200)
    plain_per_round = per_round // 4  # the naive path is slow; fewer samples keep the run short

    async def measure() -> dict[str, tuple[list[float], list[float]]]:
        backend = SubprocessBackend()
        data: dict[str, tuple[list[float], list[float]]] = {}

        def add(key: str, lat: list[float], rps: float) -> None:
            data.setdefault(key, ([], []))[0].extend(lat)
            data[key][1].append(rps)

        try:
            sandboxes = [await backend.open() for _ in range(2)]
            async with SandboxPool(backend, max_concurrency=2, warm=2) as pool:
                await _warm(sandboxes, 20)
                await _pooled(pool, 2, 20)
                for _ in range(rounds):
                    for c in (1, 2):
                        loop = asyncio.get_running_loop()
                        lat, rps = await loop.run_in_executor(None, _plain, python, c, plain_per_round)
                        add(f"plain c={c}", lat, rps)
                        add(f"warm c={c}", *await _warm(sandboxes[:c], per_round))
                        add(f"pool c={c}", *await _pooled(pool, c, per_round))
                uss, pss = _slot_memory(sandboxes)
                data["memory"] = ([uss], [pss])
                data["missing"] = ([], [])
                data["missing_list"] = ([float(len(backend.capabilities.missing_protections))], [])
            for sb in sandboxes:
                await sb.close()
        finally:
            await backend.aclose()
        return data

    data = asyncio.run(measure())
    rows: list[Row] = []
    rps = {key: statistics.median(v[1]) for key, v in data.items() if key.startswith(("plain", "warm", "pool"))}
    for c in (1, 2):
        plain_key, warm_key, pool_key = f"plain c={c}", f"warm c={c}", f"pool c={c}"
        rows.append(
            row_from_samples(
                BENCH, f"plain subprocess.run python3 -c, c={c}", data[plain_key][0], throughput=rps[plain_key]
            )
        )
        warm = row_from_samples(
            BENCH,
            f"sandbox.run (warm fork server), c={c}",
            data[warm_key][0],
            throughput=rps[warm_key],
            baseline="plain",
            ratio=rps[warm_key] / rps[plain_key],
        )
        if c == 1:
            warm.target = f"p50 <= {TARGET_P50_MS} ms"
            warm.met = warm.median_ms <= TARGET_P50_MS
        else:
            warm.target = f">= {TARGET_RPS:.0f}/s and >= {TARGET_RATIO}x plain"
            warm.met = rps[warm_key] >= TARGET_RPS and rps[warm_key] / rps[plain_key] >= TARGET_RATIO
        rows.append(warm)
        rows.append(
            row_from_samples(
                BENCH,
                f"SandboxPool.run, c={c}",
                data[pool_key][0],
                throughput=rps[pool_key],
                baseline="plain",
                ratio=rps[pool_key] / rps[plain_key],
                extra={"pool_vs_direct": rps[pool_key] / rps[warm_key]},
            )
        )
    uss, pss = data["memory"][0][0], data["memory"][1][0]
    rows.append(
        Row(
            BENCH,
            f"memory per warm slot: USS {uss:.2f} MB, PSS {pss:.2f} MB",
            2,
            0.0,
            0.0,
            target=f"<= {TARGET_SLOT_MB:.0f} MB",
            met=uss <= TARGET_SLOT_MB,
            extra={"uss_mb": uss, "pss_mb": pss, "cores": os.cpu_count()},
        )
    )
    return rows


def run(quick: bool = False) -> list[Row]:
    """Measure and return the rows (``sandboxkit bench subprocess``)."""
    return _rows(quick)
