"""The host's own CPU per pooled run, this tree against a base tree, side by side in one run (issue 30).

``print(1)`` through one warm ``SandboxPool("subprocess")`` in a closed loop: at c=8 for the host CPU per
run (``getrusage(RUSAGE_SELF)`` user+system of the host process over the loop, divided by the runs; the
sandboxes' own processes are not the host's) and runs/s, and at c=1 for the p50 latency.

Each measurement runs in a fresh interpreter (``_hostcpu_worker.py``) with the tree's ``src`` first on
``PYTHONPATH``; the two trees alternate, the order flipping every round, so load from other work falls
on both. The base tree is ``SANDBOXKIT_BASE_SRC`` (a ``src`` directory, e.g. of ``git worktree add
/tmp/base 7367d46``); without it only this tree is measured. ``SANDBOXKIT_HOSTCPU_SECONDS`` sets the
seconds per measurement (default 4, ``--quick`` 2). The rows give the median over rounds; ``extra``
holds every round's figures and the load average of each.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sandboxkit.benchmarking import Row

WORKER = Path(__file__).with_name("_hostcpu_worker.py")
THIS_SRC = Path(__file__).resolve().parent.parent / "src"


def _measure(src: str, concurrency: int, seconds: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(WORKER), str(concurrency), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _row(label: str, case: str, figures: list[dict[str, Any]], key: str, baseline: str | None) -> Row:
    runs = sum(f["runs"] for f in figures)
    wrong = sum(f["wrong"] for f in figures)
    return Row(
        "hostcpu",
        f"{label}: {case}",
        runs,
        statistics.median(f["p50_ms"] for f in figures),
        statistics.median(f["p99_ms"] for f in figures),
        throughput=statistics.median(f["runs_per_s"] for f in figures),
        baseline=baseline,
        met=None if wrong == 0 else False,
        extra={
            key: round(statistics.median(f[key] for f in figures), 4),
            "rounds": [{k: round(f[k], 4) for k in (key, "runs_per_s", "p50_ms", "load_avg")} for f in figures],
            "tree": figures[0]["tree"],
            "wrong": wrong,
        },
    )


def run(quick: bool = False) -> list[Row]:
    seconds = float(os.environ.get("SANDBOXKIT_HOSTCPU_SECONDS", "2" if quick else "4"))
    rounds = 2 if quick else 3
    trees = {"now": str(THIS_SRC)}
    base = os.environ.get("SANDBOXKIT_BASE_SRC")
    if base:
        trees = {"base": base, **trees}
    wide: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    one: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for i in range(rounds):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for label in order:
            wide[label].append(_measure(trees[label], 8, seconds))
            one[label].append(_measure(trees[label], 1, seconds))
    rows = []
    for label in trees:
        baseline = None if label == "base" or not base else "base"
        rows.append(_row(label, "print(1), c=8, host CPU per run", wide[label], "host_cpu_ms_per_run", baseline))
        rows.append(_row(label, "print(1), c=1, p50", one[label], "host_cpu_ms_per_run", baseline))
    print(
        "hostcpu: "
        + "; ".join(
            f"{r.case}: {r.extra['host_cpu_ms_per_run']:.3f} ms/run, {r.throughput:.0f} runs/s, p50 {r.median_ms:.2f} ms"
            for r in rows
        )
    )
    return rows


if __name__ == "__main__":  # pragma: no cover
    from sandboxkit.benchmarking import render

    print(render(run(quick="--quick" in sys.argv)))
