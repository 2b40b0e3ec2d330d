"""Forking a prepared session (``pool.fork``) against the naive path, side by side (issue 16).

The state: a session holding 100 MB of files in 1,000 files (100 KB each, in 20 folders). The
naive path is what a GRPO rollout does today: open 16 fresh sessions and write the files into
each. The fork path checkpoints once (timed separately) and calls ``pool.fork(checkpoint, 16)``.
Both are measured until their 16 sessions are open and hold the files; rounds alternate (fork,
naive, fork, ...) and medians over rounds are compared, because the machine is shared.

Targets: subprocess <= 20 ms per copy (p50) and memory/disk per copy <= 5% of the workspace;
Docker <= 300 ms per copy. "Per copy" is the wall time of opening all 16 divided by 16.

Docker is measured twice, each time with both paths under the same conditions: *warm* (the pool
holds 16 idle containers, ``warm=``, as a training loop's pool does after its first step: a
fork loads the checkpoint into an idle container, a naive session writes the files into one) and
*cold* (no idle container: every fork and every naive session starts a new container;
``max_uses=1`` closes each container when its session closes). Closing the 16 forks (a reset
each, which makes them idle again) is timed apart.
Memory per copy is the growth of the host's shared memory (tmpfs pages) and kernel slab (inodes)
while the 16 forks are open, divided by 16: an upper bound, since other work on the machine
moves both.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from typing import Any

from sandboxkit import SandboxPool, Session
from sandboxkit.benchmarking import Row
from sandboxkit.models import Limits

BENCH = "fork"
COPIES = 16
TARGET_MS = {"subprocess": 20.0, "docker": 300.0}
TARGET_COST = 0.05
LIMITS = Limits(timeout_s=30)


def _files(total_mb: int, count: int) -> dict[str, bytes]:
    size = total_mb * 1_000_000 // count
    blob = os.urandom(size)
    # Distinct contents (a counter in front) so no layer of any backend can deduplicate them.
    return {f"data/d{i % 20:02d}/f{i:04d}.bin": i.to_bytes(4, "big") + blob[4:] for i in range(count)}


def _meminfo_kb() -> int:
    fields: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0])
    return fields["Shmem"] + fields["Slab"]


async def _write_all(session: Session, files: dict[str, bytes]) -> None:
    items = list(files.items())
    for i in range(0, len(items), 100):  # bounded messages for backends that ship files over a socket
        await session.write_files(dict(items[i : i + 100]))


async def _measure(backend: str, files: dict[str, bytes], rounds: int, warm: bool = False) -> dict[str, Any]:
    # Warm: the parent takes one of the COPIES + 1 warm sandboxes, each path finds COPIES idle ones.
    # Cold: max_uses=1 closes every sandbox when its session closes, so none is ever idle.
    async with SandboxPool(
        backend,
        max_concurrency=COPIES + 2,
        max_sandboxes=COPIES + 2,
        limits=LIMITS,
        warm=COPIES + 1 if warm else 0,
        max_uses=1000 if warm else 1,
    ) as pool:
        parent = pool.session()
        await _write_all(parent, files)
        probe = "data/d07/f0007.bin"
        started = time.perf_counter()
        checkpoint = await parent.checkpoint()
        checkpoint_s = time.perf_counter() - started
        fork_s: list[float] = []
        naive_s: list[float] = []
        cost: list[float] = []
        close_s: list[float] = []
        for i in range(rounds):
            print(f"  {backend}: round {i + 1}/{rounds} (checkpoint {checkpoint_s * 1000:.0f} ms)", file=sys.stderr)
            before = _meminfo_kb()
            started = time.perf_counter()
            forks = await pool.fork(checkpoint, COPIES)
            fork_s.append((time.perf_counter() - started) / COPIES)
            cost.append((_meminfo_kb() - before) * 1024 / COPIES)
            assert (await forks[-1].read_files([probe]))[probe] == files[probe]
            started = time.perf_counter()
            await asyncio.gather(*(s.close() for s in forks))
            close_s.append((time.perf_counter() - started) / COPIES)

            started = time.perf_counter()
            fresh = [pool.session() for _ in range(COPIES)]
            await asyncio.gather(*(_write_all(s, files) for s in fresh))
            naive_s.append((time.perf_counter() - started) / COPIES)
            assert (await fresh[-1].read_files([probe]))[probe] == files[probe]
            await asyncio.gather(*(s.close() for s in fresh))
        await checkpoint.release()
        await parent.close()
    return {"fork": fork_s, "naive": naive_s, "cost": cost, "checkpoint": checkpoint_s, "close": close_s}


def _available(backend: str) -> bool:
    from sandboxkit.registry import backend as make_backend

    try:
        b = make_backend(backend)
    except Exception:
        return False
    usable = b.availability().usable and b.capabilities.fork != "none"
    asyncio.run(b.aclose())
    return usable


def run(quick: bool = False) -> list[Row]:
    """Measure and return the rows (``sandboxkit bench fork``)."""
    rounds = 2 if quick else 5
    total_mb = 100
    files = _files(total_mb, 1000)
    workspace = sum(len(v) for v in files.values())
    rows: list[Row] = []
    for backend in ("subprocess", "docker"):
        if not _available(backend):
            rows.append(Row(BENCH, f"{backend}: not available here, skipped", 0, 0.0, 0.0))
            continue
        if backend == "subprocess":
            data = asyncio.run(_measure(backend, files, rounds))
            rows += _rows(backend, "", data, total_mb)
            share = statistics.median(data["cost"]) / workspace
            rows.append(
                Row(
                    BENCH,
                    f"{backend}: memory+disk per copy {share * 100:.2f}% of the workspace",
                    rounds,
                    0.0,
                    0.0,
                    target=f"<= {TARGET_COST * 100:.0f}%",
                    met=share <= TARGET_COST,
                    extra={"bytes_per_copy": statistics.median(data["cost"])},
                )
            )
            continue
        # Docker's naive path writes 1.6 GB through the engine per round: tens of seconds on 2 cores.
        for warm in (True, False):
            data = asyncio.run(_measure(backend, files, max(3, rounds // 2 + 1), warm=warm))
            rows += _rows(backend, " (warm pool)" if warm else " (cold: new containers)", data, total_mb)
    return rows


def _rows(backend: str, variant: str, data: dict[str, Any], total_mb: int) -> list[Row]:
    fork_ms = statistics.median(data["fork"]) * 1000
    naive_ms = statistics.median(data["naive"]) * 1000
    load = os.getloadavg()[0]
    target = TARGET_MS[backend]
    return [
        Row(
            BENCH,
            f"{backend}{variant}: 16 sessions + rewrite {total_mb} MB / 1000 files, per copy",
            len(data["naive"]),
            naive_ms,
            max(data["naive"]) * 1000,
            extra={"load1": load},
        ),
        Row(
            BENCH,
            f"{backend}{variant}: pool.fork(checkpoint, 16), per copy",
            len(data["fork"]),
            fork_ms,
            max(data["fork"]) * 1000,
            baseline="naive",
            ratio=naive_ms / fork_ms if fork_ms else None,
            target=f"<= {target:.0f} ms per copy",
            met=fork_ms <= target,
            extra={"load1": load, "checkpoint_ms": data["checkpoint"] * 1000},
        ),
        Row(
            BENCH,
            f"{backend}{variant}: closing the 16 forks, per copy",
            len(data["close"]),
            statistics.median(data["close"]) * 1000,
            max(data["close"]) * 1000,
        ),
        Row(BENCH, f"{backend}{variant}: checkpoint once ({total_mb} MB)", 1, data["checkpoint"] * 1000, 0.0),
    ]
