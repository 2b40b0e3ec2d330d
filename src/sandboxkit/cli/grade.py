"""``sandboxkit grade FILE.jsonl``: grade a file of completions, print a summary, write results.

Each input line is a row ``{"id", "completion", "tests", "language"?, "banned_patterns"?, "shaping"?,
"compare"?, "timeout_s"?, "isolate_asserts"?}``. Each output line is ``{"id", <Verdict.to_dict() keys>, "cases": [...]}``,
one per input row, in input order. A line that is not JSON, or a row without ``tests``, gets an
``invalid`` result with the reason; the rest of the file is graded.

Exit code: 0 when grading ran (whatever the programs did); 2 for usage errors (missing file, bad
option, unknown backend); 3 when the sandbox infrastructure failed for at least one row.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sandboxkit.cli._common import EXIT_INFRA, EXIT_USAGE, err_console, fail
from sandboxkit.errors import SandboxError, SandboxkitError


def register(app: typer.Typer) -> None:
    """Add the command to ``app``."""
    app.command("grade")(grade)


def grade(
    file: Annotated[Path, typer.Argument(help="JSONL file of rows {id, completion, tests, language?, ...}.")],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend that runs the code.")] = "subprocess",
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Sandbox runs in flight at once.")] = 8,
    processes: Annotated[
        str,
        typer.Option(
            "--processes",
            "-P",
            help="Host processes that grade rows: a number, or auto (one per core but one, at most one per"
            " 4 jobs, 16 at most; 1 on two cores or fewer). See docs/multiprocess.md.",
        ),
    ] = "auto",
    output: Annotated[
        str, typer.Option("--output", "-o", help="Where to write one result row per input row ('-' = stdout).")
    ] = "results.jsonl",
    shaping: Annotated[
        str,
        typer.Option(
            "--shaping", "-s", help="pass_rate | all_or_nothing [,STATUS=PENALTY...], e.g. 'pass_rate,timeout=-1'."
        ),
    ] = "pass_rate",
    language: Annotated[str, typer.Option("--language", "-l", help="Language of rows that do not say.")] = "python",
    timeout_s: Annotated[
        float | None,
        typer.Option(
            "--timeout-s", "--timeout", "-t", min=0.001, help="Per-case time limit in seconds (rows may override)."
        ),
    ] = None,
    memory_mb: Annotated[int | None, typer.Option(help="Memory limit of each run in MiB.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    isolate_asserts: Annotated[
        bool,
        typer.Option(
            "--isolate-asserts/--no-isolate-asserts",
            help="Run Python assert tests outside the solution's process, so no program forges a pass"
            " (default; --no-isolate-asserts trusts the solution's process and is about twice as fast).",
        ),
    ] = True,
) -> None:
    """Grade completions against their tests; print a summary; write results."""
    from sandboxkit.judge.shaping import parse_shaping
    from sandboxkit.languages import resolve_language

    try:
        parse_shaping(shaping)
        resolve_language(language)
    except (ValueError, SandboxError) as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from exc
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err_console.print(f"error: cannot read {str(file)!r}: {getattr(exc, 'strerror', None) or exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from exc
    ids, rows, broken = _read_rows(text)
    defaults: dict[str, Any] = {"language": language, "shaping": shaping}
    if timeout_s is not None:
        defaults["timeout_s"] = timeout_s
    defaults["isolate_asserts"] = isolate_asserts
    summary_console = Console(stderr=output == "-")
    try:
        verdicts, wall, metrics = asyncio.run(
            _grade_all(rows, backend, jobs, memory_mb, defaults, quiet, _processes(processes))
        )
    except SandboxkitError as exc:
        fail(exc)
    results = _merge(ids, verdicts, broken)
    _write(results, output)
    summary_console.print(_summary(results, wall, backend, metrics))
    summary_console.print(_per_language(results, wall, jobs))
    if output != "-":
        summary_console.print(f"results written to {output}", highlight=False, markup=False)
    if any(r.get("infra_error") for r in results):
        err_console.print(
            "error: the sandbox infrastructure failed for some rows (reward None); see 'error' in the results"
        )
        raise typer.Exit(EXIT_INFRA)


def _read_rows(text: str) -> tuple[list[str], list[Any], dict[int, str]]:
    """Rows to grade, the id of every line, and the lines that are not JSON (position -> reason)."""
    ids: list[str] = []
    rows: list[Any] = []
    broken: dict[int, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        position = len(ids)
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            ids.append(f"line-{number}")
            broken[position] = f"line {number} is not valid JSON: {exc.msg} (column {exc.colno})"
            rows.append(None)
            continue
        row_id = row.get("id") if isinstance(row, dict) else None
        ids.append(str(row_id) if row_id is not None else f"line-{number}")
        rows.append(row)
    return ids, rows, broken


def _processes(value: str) -> int | str:
    """``--processes`` as the pool takes it: ``auto`` or a number (the pool rejects anything else)."""
    return int(value) if value.strip().isdigit() else value.strip()


async def _grade_all(
    rows: Sequence[Any],
    backend: str,
    jobs: int,
    memory_mb: int | None,
    defaults: dict[str, Any],
    quiet: bool,
    processes: int | str = 1,
) -> tuple[list[Any], float, dict[str, Any]]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from sandboxkit.judge import grade_many
    from sandboxkit.models import Limits
    from sandboxkit.pool import SandboxPool

    todo = [i for i, row in enumerate(rows) if row is not None]
    limits = Limits() if memory_mb is None else Limits(memory_mb=memory_mb)
    progress = Progress(
        TextColumn("[bold]grading[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[passed]} passed"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet,
        transient=False,
    )
    passed = 0
    started = time.perf_counter()
    async with SandboxPool(backend, max_concurrency=jobs, limits=limits, processes=processes) as pool:
        with progress:
            task = progress.add_task("grading", total=len(todo), passed=0)

            def on_result(_: int, verdict: Any) -> None:
                nonlocal passed
                passed += verdict.status == "ok"
                progress.update(task, advance=1, passed=passed)

            graded = await grade_many(pool, [rows[i] for i in todo], on_result=on_result, limits=limits, **defaults)
        metrics = pool.metrics()
    wall = time.perf_counter() - started
    verdicts: list[Any] = [None] * len(rows)
    for i, verdict in zip(todo, graded, strict=True):
        verdicts[i] = verdict
    return verdicts, wall, metrics


def _merge(ids: list[str], verdicts: list[Any], broken: dict[int, str]) -> list[dict[str, Any]]:
    from sandboxkit.judge.verdict import Verdict

    results = []
    for position, row_id in enumerate(ids):
        verdict = verdicts[position]
        if verdict is None:
            verdict = Verdict(status="invalid", error=broken.get(position, "row was not graded"))
        cases = [c.model_dump() for c in verdict.cases]
        results.append(
            {
                "id": row_id,
                **verdict.to_dict(),
                "cases": cases,
                "timing": dict(verdict.timing),
                "backend": verdict.backend,
            }
        )
    return results


def _write(results: list[dict[str, Any]], output: str) -> None:
    stream: TextIO
    if output == "-":
        stream = sys.stdout
        for row in results:
            stream.write(json.dumps(row) + "\n")
        stream.flush()
        return
    try:
        with open(output, "w", encoding="utf-8") as handle:
            for row in results:
                handle.write(json.dumps(row) + "\n")
    except OSError as exc:
        err_console.print(f"error: cannot write {output!r}: {exc.strerror}", markup=False)
        raise typer.Exit(EXIT_USAGE) from exc


def _summary(results: list[dict[str, Any]], wall: float, backend: str, metrics: dict[str, Any]) -> Table:
    from sandboxkit.metrics import percentile

    n = len(results)
    graded = [r for r in results if r["status"] not in ("invalid", "infra_error")]
    rewards = [r["reward"] for r in results if r["reward"] is not None]
    latencies = [r["duration_s"] for r in graded]
    counts = Counter(r["status"] for r in results)
    table = Table(title=f"sandboxkit grade ({escape(backend)})", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    table.add_row("problems", str(n))
    table.add_row("all cases passed", f"{counts.get('ok', 0)} ({100 * counts.get('ok', 0) / n if n else 0:.1f}%)")
    mean_rate = statistics.fmean(r["pass_rate"] for r in graded) if graded else 0.0
    table.add_row("mean pass rate", f"{mean_rate:.3f}")
    table.add_row("mean reward", f"{statistics.fmean(rewards):.3f}" if rewards else "-")
    for status, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(f"  status {escape(str(status))}", str(count))
    table.add_row("programs/s", f"{len(graded) / wall:.1f}" if wall > 0 else "-")
    table.add_row("latency p50 / p99", f"{percentile(latencies, 0.5):.3f}s / {percentile(latencies, 0.99):.3f}s")
    ran_on = Counter(str(r["backend"]) for r in results if r.get("backend"))
    if len(ran_on) > 1 or set(ran_on) - {backend}:  # a spillover pool: where each row ran
        for name, count in sorted(ran_on.items()):
            table.add_row(f"  ran on {escape(name)}", str(count))
    table.add_row("sandboxes opened", str(metrics.get("sandboxes_created", "-")))
    table.add_row("wall time", f"{wall:.2f}s")
    return table


def _per_language(results: list[dict[str, Any]], wall: float, jobs: int) -> Table:
    """Per language: how many programs, how fast, and where their time went (queue, compile, run).

    ``programs/s`` is the language's share of the run: its programs over the wall time its gradings
    took out of the ``jobs`` slots (sum of their durations / jobs), so a slow language shows as slow
    even when it was graded alongside fast ones. The time columns are means per program, summed over
    its sandbox runs: ``queue`` is waiting for a slot or a sandbox plus the backend's own overhead.
    """
    from sandboxkit.metrics import percentile

    table = Table(title="per language (mean seconds per program)")
    for name in ("language", "n", "prog/s", "p50", "queue", "compile", "run", "ok"):
        table.add_column(name, justify="left" if name == "language" else "right")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in results:
        if row["status"] not in ("invalid",):
            groups.setdefault(str(row.get("language") or "?"), []).append(row)
    for language, rows in sorted(groups.items()):
        busy = sum(r["duration_s"] for r in rows) / max(1, jobs)
        share = min(wall, busy) if wall > 0 else busy
        timing = [r.get("timing") or {} for r in rows]

        def mean(key: str, timing: list[dict[str, float]] = timing) -> str:
            return f"{statistics.fmean(t.get(key, 0.0) for t in timing):.3f}" if timing else "-"

        table.add_row(
            escape(language),
            str(len(rows)),
            f"{len(rows) / share:.1f}" if share > 0 else "-",
            f"{percentile([r['duration_s'] for r in rows], 0.5):.3f}",
            mean("queue_s"),
            mean("compile_s"),
            mean("run_s"),
            str(sum(r["status"] == "ok" for r in rows)),
        )
    return table
