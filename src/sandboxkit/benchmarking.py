"""Small helpers shared by the benchmarks in ``benchmarks/`` and ``sandboxkit bench``.

A benchmark module ``benchmarks/bench_<name>.py`` defines ``run(quick: bool) -> list[Row]``.
Rows measured side by side in one run carry the ratio against their baseline row, because
absolute numbers on a shared 2-core machine are noisy while ratios are not.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sandboxkit.metrics import percentile

__all__ = ["Row", "closed_loop", "render", "row_from_samples", "save_plot"]


@dataclass
class Row:
    """One measured case.

    Attributes:
        benchmark: benchmark name (``pool``, ``subprocess``...).
        case: what was measured.
        median_ms / p99_ms: per-operation latency.
        throughput: operations per second, when that is the figure of merit.
        ratio: this row's figure of merit divided by the baseline's (throughput ratio, or
            baseline latency / this latency), when ``baseline`` names a row.
        target: the goal from the issue, in words; ``met`` says whether it was reached.
    """

    benchmark: str
    case: str
    n: int
    median_ms: float
    p99_ms: float
    throughput: float | None = None
    baseline: str | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def row_from_samples(
    benchmark: str, case: str, samples_s: Sequence[float], *, throughput: float | None = None, **kw: Any
) -> Row:
    """Build a row from per-operation durations in seconds."""
    data = list(samples_s)
    med = statistics.median(data) * 1000 if data else 0.0
    return Row(benchmark, case, len(data), med, percentile(data, 0.99) * 1000, throughput, **kw)


async def closed_loop(call: Callable[[int], Awaitable[Any]], workers: int, n: int) -> tuple[list[float], float]:
    """Drive ``call`` with ``workers`` concurrent callers, each waiting for its previous call.

    Worker ``i`` awaits ``call(i)`` ``max(1, n // workers)`` times, so concurrency stays exactly
    ``workers`` (a closed loop: what a trainer with that many calls in flight sees).

    Returns:
        Per-call latencies in seconds, and calls per second over the whole run.
    """
    latencies: list[float] = []
    share = max(1, n // workers)

    async def worker(i: int) -> None:
        for _ in range(share):
            started = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return latencies, share * workers / (time.perf_counter() - began)


def render(rows: Sequence[Row]) -> Any:
    """A rich Table of the rows."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="sandboxkit bench")
    # A row whose figures do not fit the columns (CPU-seconds, memory...) says them in extra["details"].
    details = any("details" in r.extra for r in rows)
    columns = ("benchmark", "case", "n", "median ms", "p99 ms", "ops/s", "ratio", "target", "met")
    for col in columns + (("details",) if details else ()):
        table.add_column(col, justify="right" if col in {"n", "median ms", "p99 ms", "ops/s", "ratio"} else "left")
    for r in rows:
        met = "" if r.met is None else ("[green]yes[/]" if r.met else "[red]no[/]")
        more = (escape(str(r.extra.get("details", ""))),) if details else ()
        table.add_row(
            r.benchmark,
            r.case,
            str(r.n),
            f"{r.median_ms:.3f}",
            f"{r.p99_ms:.3f}",
            "" if r.throughput is None else f"{r.throughput:.1f}",
            "" if r.ratio is None else f"{r.ratio:.2f}x vs {r.baseline}",
            r.target,
            met,
            *more,
        )
    return table


def save_plot(rows: Sequence[Row], path: str) -> None:
    """Bar chart of medians (and throughput when present), one panel per benchmark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(dict.fromkeys(r.benchmark for r in rows))
    fig, axes = plt.subplots(len(benches), 1, figsize=(9, 2.6 * len(benches)), squeeze=False)
    for ax, bench in zip(axes[:, 0], benches, strict=True):
        sub = [r for r in rows if r.benchmark == bench]
        use_tp = all(r.throughput is not None for r in sub)
        values = [r.throughput if use_tp else r.median_ms for r in sub]
        ax.barh([r.case for r in sub], values, color="#4c72b0")
        ax.set_title(f"{bench}: {'ops/s (higher is better)' if use_tp else 'median ms (lower is better)'}")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.1f}" if use_tp else f" {v:.3f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
