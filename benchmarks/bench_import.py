"""``import sandboxkit`` against its core dependencies' import, side by side in fresh interpreters.

A trainer imports sandboxkit in every reward worker and Ray actor, so its import cost is paid many
times. The baseline imports only the core dependencies (pydantic, httpx, pluggy); sandboxkit should
cost at most 1.3x that. Rounds alternate between the two in fresh interpreters and medians are
compared, because the machine is shared: this is a ratio, not a timing, and it lives here rather
than in the unit suite, where a loaded machine made it flaky (1.33x seen once under load).
"""

from __future__ import annotations

import subprocess
import sys

from sandboxkit.benchmarking import Row, row_from_samples

BENCH = "import"
CORE = "pydantic, httpx, pluggy"


def _import_time_s(modules: str) -> float:
    code = f"import time; t = time.perf_counter(); import {modules}; print(time.perf_counter() - t)"
    return float(subprocess.check_output([sys.executable, "-X", "frozen_modules=on", "-c", code], text=True))


def run(quick: bool) -> list[Row]:
    rounds = 5 if quick else 21
    base: list[float] = []
    ours: list[float] = []
    for _ in range(rounds):
        base.append(_import_time_s(CORE))
        ours.append(_import_time_s("sandboxkit"))
    base_row = row_from_samples(BENCH, f"import {CORE}", base)
    row = row_from_samples(BENCH, "import sandboxkit", ours, baseline=base_row.case)
    row.ratio = row.median_ms / base_row.median_ms if base_row.median_ms else None
    row.target = "<= 1.3x the core dependencies"
    row.met = row.ratio is not None and row.ratio <= 1.3
    return [base_row, row]
