"""Verdicts of a mixed reward batch do not depend on the load: identical at -j 2 and at -j 16.

Per-case time limits are CPU time, so a correct program that waits behind 15 others for a CPU is
not a timeout, and an infinite loop is a timeout however idle the machine is. The batch mixes what
an RL step produces (correct, wrong, crashing, looping completions), with ``pass_rate`` shaping so
every case of every completion runs, looping ones included.
"""

from __future__ import annotations

from typing import Any

from sandboxkit import SandboxPool
from sandboxkit.judge import Verdict, grade_many
from support.judge import needs_subprocess

pytestmark = needs_subprocess

CASES = [
    {"stdin": " ".join(map(str, range(i + 2))) + "\n", "expected_stdout": f"{sum(range(i + 2))}\n"} for i in range(4)
]
READ = "nums = list(map(int, input().split()))\n"
KINDS = {
    "correct": READ + "print(sum(nums))\n",
    "wrong": READ + "print(sum(nums) + 1)\n",
    "crash": READ + "print(nums[len(nums)])\n",
    "loop": READ + "while sum(nums) >= 0:\n    pass\n",
    # Busy but correct: ~0.15 s of CPU, well inside the 0.4 s limit, however long it waits for a CPU.
    "busy": READ + "x = 0\nfor i in range(1_500_000):\n    x += i\nprint(sum(nums))\n",
}
MIX = ["correct"] * 8 + ["wrong"] * 5 + ["crash"] * 2 + ["loop"] * 2 + ["busy"] * 3


async def _grade(rows: list[dict[str, Any]], jobs: int) -> list[Verdict]:
    async with SandboxPool("subprocess", max_concurrency=jobs) as pool:
        return await grade_many(pool, rows, shaping="pass_rate", timeout_s=0.4)


async def test_verdicts_are_identical_at_j2_and_j16() -> None:
    rows = [{"completion": f"```python\n{KINDS[kind]}```", "tests": CASES} for kind in MIX]
    narrow, wide = await _grade(rows, 2), await _grade(rows, 16)
    key = [(v.status, v.passed, v.reward, [c.status for c in v.cases]) for v in narrow]
    assert key == [(v.status, v.passed, v.reward, [c.status for c in v.cases]) for v in wide]
    by_kind = {kind: key[MIX.index(kind)][0] for kind in KINDS}
    assert by_kind == {"correct": "ok", "wrong": "failed", "crash": "failed", "loop": "timeout", "busy": "ok"}
