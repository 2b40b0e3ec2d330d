"""A realistic reward batch: 256 Python completions x 10 stdio cases, graded at -j 16 and at -j 2.

The mix an RL step produces early in training: 50% correct, 30% wrong answer, 10% crash, 10% infinite
loop (1 s time limit per case). The figure of merit is the batch's wall time against **the slowest
single timeout chain**: the time to grade one infinite-loop completion alone, on its own pool, with
the same shaping (measured in the same run). Target (issue 13): batch <= 1.5x chain, and every
verdict identical at -j 2 and -j 16 (limits measured in CPU time cannot depend on the load).

Shapings: ``all_or_nothing`` (binary: grading stops at a completion's first failing case) is the
headline; ``pass_rate`` runs every case, so each looping case spends its full second of CPU time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

from sandboxkit import SandboxPool
from sandboxkit.benchmarking import Row
from sandboxkit.judge import Verdict, grade_many
from sandboxkit.metrics import percentile

TIMEOUT_S = 1.0
CASES = [
    {"stdin": " ".join(str(k) for k in range(i + 2)) + "\n", "expected_stdout": f"{sum(range(i + 2))}\n"}
    for i in range(10)
]
KINDS = {
    "correct": "```python\nnums = list(map(int, input().split()))\nprint(sum(nums))\n```",
    "wrong": "```python\nnums = list(map(int, input().split()))\nprint(sum(nums) + 1)\n```",
    "crash": "```python\nnums = list(map(int, input().split()))\nprint(nums[len(nums)])\n```",
    "loop": "```python\nnums = list(map(int, input().split()))\nwhile sum(nums) >= 0:\n    pass\n```",
}
MIX = {"correct": 0.5, "wrong": 0.3, "crash": 0.1, "loop": 0.1}


def batch(n: int) -> list[dict[str, Any]]:
    """``n`` rows in the mix above, interleaved (as a rollout batch arrives)."""
    counts = {kind: round(share * n) for kind, share in MIX.items()}
    counts["correct"] += n - sum(counts.values())
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    kinds = [kinds[(i * 37) % n] for i in range(n)]  # interleaved, the same every run (37 is prime to n)
    return [{"id": f"{kind}-{i}", "completion": KINDS[kind], "tests": CASES} for i, kind in enumerate(kinds)]


async def _grade(rows: list[dict[str, Any]], jobs: int, shaping: str) -> tuple[float, list[Verdict]]:
    async with SandboxPool("subprocess", max_concurrency=jobs) as pool:
        await grade_many(pool, [{"completion": KINDS["correct"], "tests": CASES[:1]}] * jobs)  # warm sandboxes
        started = time.perf_counter()
        verdicts = await grade_many(pool, rows, shaping=shaping, timeout_s=TIMEOUT_S)
        return time.perf_counter() - started, verdicts


def _key(verdicts: list[Verdict]) -> list[tuple[Any, ...]]:
    return [(v.status, v.passed, v.reward, tuple(c.status for c in v.cases)) for v in verdicts]


def run(quick: bool = False) -> list[Row]:
    n = 64 if quick else 256
    rows = batch(n)
    out: list[Row] = []
    for shaping in ("all_or_nothing",) if quick else ("all_or_nothing", "pass_rate"):
        load = os.getloadavg()[0]
        chain, _ = asyncio.run(_grade([{"completion": KINDS["loop"], "tests": CASES}], 16, shaping))
        wall16, v16 = asyncio.run(_grade(rows, 16, shaping))
        wall2, v2 = (wall16, v16) if shaping == "pass_rate" else asyncio.run(_grade(rows, 2, shaping))
        same = _key(v16) == _key(v2)
        ratio = wall16 / chain
        statuses = Counter(v.status for v in v16)
        lat = [v.duration_s for v in v16]
        print(
            f"grade-batch[{shaping}]: {n} completions x {len(CASES)} cases in {wall16:.2f}s at -j 16 "
            f"({wall2:.2f}s at -j 2); slowest single timeout chain {chain:.2f}s -> {ratio:.2f}x; "
            f"verdicts identical at -j 2 and -j 16: {same}; {dict(statuses)}; load {load:.2f}"
        )
        out.append(
            Row(
                "grade-batch",
                f"{n}x{len(CASES)} mixed, {shaping}, -j 16",
                n,
                sorted(lat)[len(lat) // 2] * 1000,
                percentile(lat, 0.99) * 1000,
                throughput=n / wall16,
                ratio=ratio,
                baseline="one timeout chain alone",
                target="<= 1.5x the slowest single timeout chain; same verdicts at -j 2 and -j 16",
                met=ratio <= 1.5 and same,
                extra={
                    "wall_j16_s": wall16,
                    "wall_j2_s": wall2 if shaping != "pass_rate" else None,
                    "chain_s": chain,
                    "verdicts_identical": same if shaping != "pass_rate" else None,
                    "statuses": dict(statuses),
                    "load_avg": load,
                },
            )
        )
    return out


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick=True)))
