"""Grading throughput on examples/problems.jsonl: the judge's batching side by side with one case per run.

* **batched** (what ``sandboxkit grade`` does): Python call/assert cases of a problem in one run of the
  per-case harness, compiled stdio problems compiled once in a session, other stdio cases one run each.
* **one case per run** (baseline, what verl's Sandbox Fusion scorer does): every test case is graded as
  its own problem, so every case is its own sandbox run and a compiled program is compiled per case.

Both use the same subprocess-backed pool (same concurrency), the same rows, and must reach the same
verdicts (``extra.verdicts_agree``). The figure of merit is problems/s; ratio = batched / baseline.
The two modes alternate over rounds, and the median round counts (the machine is shared and noisy).
Without ``--quick`` one more round per language shows where the gain comes from.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from sandboxkit import SandboxPool
from sandboxkit.benchmarking import Row
from sandboxkit.judge import TestSuite, Verdict, grade, grade_many, parse_tests
from sandboxkit.judge.grader import ROW_OPTIONS
from sandboxkit.metrics import percentile

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems.jsonl"
CONCURRENCY = 4
QUICK_LANGUAGES = {"python", "cpp", "bash"}


def _rows(quick: bool) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    if quick:
        rows = [r for r in rows if r.get("language", "python") in QUICK_LANGUAGES]
    return rows


async def _one_case_per_run(pool: SandboxPool, row: dict[str, Any]) -> Verdict:
    """Grade each case of the row as a problem of its own, then combine the verdicts."""
    options = {k: row[k] for k in ROW_OPTIONS if row.get(k) is not None}
    started = time.perf_counter()
    try:
        suite = parse_tests(row["tests"])
    except ValueError:
        return await grade(pool, row["completion"], row["tests"], **options)
    singles = [TestSuite(cases=[case], compare=suite.compare, checker=suite.checker) for case in suite.cases]
    parts = await asyncio.gather(*(grade(pool, row["completion"], s, **options) for s in singles))
    if any(p.status in ("banned", "no_code", "invalid", "infra_error") for p in parts):
        return parts[0]
    cases = [p.cases[0].model_copy(update={"index": i}) for i, p in enumerate(parts)]
    first_bad = next((p for p in parts if p.status != "ok"), None)
    status = first_bad.status if first_bad else "ok"
    passed = sum(c.passed for c in cases)
    return Verdict(
        status=status,
        passed=passed,
        total=len(cases),
        pass_rate=passed / len(cases),
        reward=passed / len(cases),
        cases=cases,
        duration_s=time.perf_counter() - started,
    )


async def _baseline(pool: SandboxPool, rows: list[dict[str, Any]]) -> list[Verdict]:
    gate = asyncio.Semaphore(2 * CONCURRENCY)

    async def one(row: dict[str, Any]) -> Verdict:
        async with gate:
            return await _one_case_per_run(pool, row)

    return list(await asyncio.gather(*(one(r) for r in rows)))


async def _measure(rows: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    walls: dict[str, list[float]] = {"batched": [], "baseline": []}
    latencies: dict[str, list[float]] = {"batched": [], "baseline": []}
    runs: dict[str, list[int]] = {"batched": [], "baseline": []}
    verdicts: dict[str, list[Verdict]] = {}
    for _ in range(rounds):
        for mode in ("batched", "baseline"):
            async with SandboxPool("subprocess", max_concurrency=CONCURRENCY) as pool:
                started = time.perf_counter()
                if mode == "batched":
                    got = await grade_many(pool, rows, max_in_flight=2 * CONCURRENCY)
                else:
                    got = await _baseline(pool, rows)
                walls[mode].append(time.perf_counter() - started)
                runs[mode].append(int(pool.metrics()["calls"]))
            latencies[mode].extend(v.duration_s for v in got)
            verdicts[mode] = got
    disagree = [
        str(row.get("id"))
        for row, a, b in zip(rows, verdicts["batched"], verdicts["baseline"], strict=True)
        if (a.status, a.passed) != (b.status, b.passed)
    ]
    return {"walls": walls, "latencies": latencies, "runs": runs, "disagree": disagree}


def _per_language(rows: list[dict[str, Any]]) -> list[Row]:
    """One round per language: where the batching gains (Python, C++) and where it cannot (Java)."""
    out = []
    for language in sorted({r.get("language", "python") for r in rows}):
        subset = [r for r in rows if r.get("language", "python") == language]
        data = asyncio.run(_measure(subset, 1))
        speed = {mode: len(subset) / statistics.median(data["walls"][mode]) for mode in data["walls"]}
        out.append(
            Row(
                "grade",
                f"  {language} only, batched",
                len(subset),
                statistics.median(data["latencies"]["batched"]) * 1000,
                percentile(data["latencies"]["batched"], 0.99) * 1000,
                throughput=speed["batched"],
                baseline=f"{language} one case per run",
                ratio=speed["batched"] / speed["baseline"],
                extra={"baseline_throughput": speed["baseline"], "verdicts_agree": not data["disagree"]},
            )
        )
        print(f"grade[{language}]: ratio {speed['batched'] / speed['baseline']:.2f}x over {len(subset)} rows")
    return out


def run(quick: bool = False) -> list[Row]:
    rows = _rows(quick)
    rounds = 1 if quick else 2
    data = asyncio.run(_measure(rows, rounds))
    walls, lat, runs = data["walls"], data["latencies"], data["runs"]
    speed = {mode: len(rows) / statistics.median(walls[mode]) for mode in walls}
    ratio = speed["batched"] / speed["baseline"]
    common = {"n": len(rows)}
    baseline = Row(
        "grade",
        "one case per run (baseline)",
        common["n"],
        statistics.median(lat["baseline"]) * 1000,
        percentile(lat["baseline"], 0.99) * 1000,
        throughput=speed["baseline"],
        extra={"pooled_runs": statistics.median(runs["baseline"]), "wall_s": walls["baseline"]},
    )
    batched = Row(
        "grade",
        "batched (harness + compile once)",
        common["n"],
        statistics.median(lat["batched"]) * 1000,
        percentile(lat["batched"], 0.99) * 1000,
        throughput=speed["batched"],
        baseline="one case per run",
        ratio=ratio,
        target="faster than one case per run, same verdicts",
        met=ratio > 1.0 and not data["disagree"],
        extra={
            "pooled_runs": statistics.median(runs["batched"]),
            "wall_s": walls["batched"],
            "verdicts_agree": not data["disagree"],
            "disagreeing_rows": data["disagree"],
        },
    )
    print(
        f"grade: {speed['batched']:.2f} problems/s batched vs {speed['baseline']:.2f} one case per run "
        f"-> ratio {ratio:.2f}x over {len(rows)} rows ({rounds} round(s)); verdicts agree: {not data['disagree']}"
    )
    return [baseline, batched] + ([] if quick else _per_language(rows))


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick=True)))
