"""numpy and builtin-subclass return values graded with ``isolate_asserts`` off and on, side by side.

Each program returns numpy scalars/arrays or an ``IntEnum``/``int``-subclass value to five assert
cases; half are right (all must pass), half are off by one (all must fail). Both modes grade the same
rows through ``grade_many`` on one subprocess-backed ``SandboxPool(max_concurrency=2)``, alternating
over rounds; the median round counts. Figure of merit: programs/s, and isolated / plain (1.0 = the
data path costs nothing). Every verdict must be right and no isolated one ``infra_error``
(``cannot_isolate``), which is what these values gave before they were carried as data.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from sandboxkit import SandboxPool
from sandboxkit.benchmarking import Row
from sandboxkit.judge import grade_many
from sandboxkit.metrics import percentile

CONCURRENCY = 2
TIMEOUT_S = 3.0
MODES = {"plain": False, "isolated": True}

_SOLUTIONS = [
    ("import numpy as np\ndef f(x):\n    return np.int64(x) + {off}\n", "assert f({i}) == {i} + 1"),
    (
        "import numpy as np\ndef f(x):\n    return np.arange(x + {off}, dtype=np.float32) * 2\n",
        "import numpy as np\nassert np.array_equal(f({i}), np.arange({i} + 1) * 2)",
    ),
    (
        "import numpy as np\ndef f(x):\n    return np.eye(3)[x % 3] * (x + {off})\n",
        "assert f({i}).tolist()[{i} % 3] == {i} + 1",
    ),
    (
        "import enum\nclass Level(enum.IntEnum):\n    LOW = 1\n    HIGH = 2\ndef f(x):\n    return Level({off})\n",
        "assert f({i}) == 1 and f({i}).name == 'LOW'",
    ),
    (
        "class Always(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return Always(x + {off})\n",
        "assert f({i}) == {i} + 1",
    ),
]


def _rows(n: int) -> tuple[list[dict[str, Any]], list[bool]]:
    rows: list[dict[str, Any]] = []
    expected: list[bool] = []
    for k in range(n):
        source, test = _SOLUTIONS[k % len(_SOLUTIONS)]
        right = k % 2 == 0
        code = source.replace("{off}", "1" if right else "2").replace("{i}", str(k))
        tests = [{"type": "assert", "code": test.replace("{i}", str(i))} for i in range(5)]
        rows.append({"completion": code, "tests": tests})
        # The always-equal int passes a wrong answer in-process (the hole isolation closes): only its
        # isolated verdict is checked.
        expected.append(right)
    return rows, expected


async def _measure(rows: list[dict[str, Any]], expected: list[bool], rounds: int) -> dict[str, Any]:
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    latencies: dict[str, list[float]] = {m: [] for m in MODES}
    wrong = dict.fromkeys(MODES, 0)
    infra = dict.fromkeys(MODES, 0)
    forged = [r["completion"].startswith("class Always") for r in rows]
    async with SandboxPool("subprocess", max_concurrency=CONCURRENCY) as pool:
        for isolate in MODES.values():  # warm both paths before the clock starts
            await grade_many(pool, rows[:4], timeout_s=TIMEOUT_S, isolate_asserts=isolate)
        for _ in range(rounds):
            for mode, isolate in MODES.items():
                started = time.perf_counter()
                verdicts = await grade_many(pool, rows, timeout_s=TIMEOUT_S, isolate_asserts=isolate)
                walls[mode].append(time.perf_counter() - started)
                latencies[mode].extend(v.duration_s for v in verdicts)
                bad = sum(
                    (v.status == "ok") != e
                    for v, e, f in zip(verdicts, expected, forged, strict=True)
                    if isolate or not f
                )
                wrong[mode] = max(wrong[mode], bad)
                infra[mode] = max(infra[mode], sum(v.status == "infra_error" for v in verdicts))
    return {"walls": walls, "latencies": latencies, "wrong": wrong, "infra": infra}


def run(quick: bool = False) -> list[Row]:
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("isolated-values: skipped: numpy is not installed")
        return []
    n = 20 if quick else 60
    rounds = 1 if quick else 3
    rows, expected = _rows(n)
    load = os.getloadavg()[0]
    got = asyncio.run(_measure(rows, expected, rounds))
    load_after = os.getloadavg()[0]
    speed = {mode: n / statistics.median(w) for mode, w in got["walls"].items()}
    ratio = speed["isolated"] / speed["plain"]
    print(
        f"isolated-values: plain {speed['plain']:.1f} programs/s, isolated {speed['isolated']:.1f}/s -> {ratio:.2f}x; "
        f"median of {rounds} round(s) over {n} programs (5 cases each); wrong verdicts: {got['wrong']}; "
        f"infra errors: {got['infra']}; load average {load:.2f} -> {load_after:.2f}"
    )
    out = []
    for mode in MODES:
        lat = sorted(got["latencies"][mode])
        out.append(
            Row(
                "isolated-values",
                f"{mode}: numpy / subclass return values",
                n,
                statistics.median(lat) * 1000,
                percentile(lat, 0.99) * 1000,
                throughput=speed[mode],
                baseline=None if mode == "plain" else "plain: numpy / subclass return values",
                ratio=None if mode == "plain" else ratio,
                target="every verdict right, no cannot_isolate" if mode == "isolated" else "",
                met=(got["wrong"][mode] == 0 and got["infra"][mode] == 0) if mode == "isolated" else None,
                extra={"load_before": load, "load_after": load_after, "wrong": got["wrong"][mode]},
            )
        )
    return out


if __name__ == "__main__":
    from sandboxkit.benchmarking import render

    print(render(run(quick=True)))
