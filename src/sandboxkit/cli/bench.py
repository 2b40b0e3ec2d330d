"""``sandboxkit bench``: the one entry point for every benchmark in ``benchmarks/``."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from sandboxkit.cli._common import EXIT_USAGE, err_console

# Benchmark tables are read in CI logs and notes: never squeeze them to 80 columns.
console = Console(width=None if sys.stdout.isatty() else 200)


def register(app: typer.Typer) -> None:
    """Add the command to ``app``."""
    app.command("bench")(bench)


def benchmarks_dir() -> Path | None:
    """Where the benchmark modules are: $SANDBOXKIT_BENCHMARKS, ./benchmarks, or the source checkout's."""
    candidates = [
        os.environ.get("SANDBOXKIT_BENCHMARKS"),
        "benchmarks",
        str(Path(__file__).resolve().parents[3] / "benchmarks"),
    ]
    for cand in candidates:
        if cand and (Path(cand) / "__init__.py").exists():
            return Path(cand).resolve()
    return None


def _load(directory: Path, name: str) -> ModuleType:
    path = directory / f"bench_{name}.py"
    spec = importlib.util.spec_from_file_location(f"sandboxkit_benchmarks.bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as ``import`` does: dataclasses and pickling look a module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench(
    names: Annotated[list[str] | None, typer.Argument(help="Benchmarks to run (default: all available).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer iterations (smoke run).")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Save a PNG chart here.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the rows as JSON here.")] = None,
) -> None:
    """Run benchmarks side by side with their baselines and print medians, p99 and ratios."""
    from sandboxkit.benchmarking import render, save_plot

    directory = benchmarks_dir()
    if directory is None:
        err_console.print("error: benchmarks/ not found; run from a source checkout or set SANDBOXKIT_BENCHMARKS")
        raise typer.Exit(EXIT_USAGE)
    available = sorted(p.stem.removeprefix("bench_") for p in directory.glob("bench_*.py"))
    # ``grade-humaneval`` and ``grade_humaneval`` both name benchmarks/bench_grade_humaneval.py.
    chosen = [n.replace("-", "_") for n in names] if names else available
    unknown = [n for n in chosen if n not in available]
    if unknown:
        err_console.print(f"error: unknown benchmark(s) {unknown!r}; available: {', '.join(available)}", markup=False)
        raise typer.Exit(EXIT_USAGE)
    rows = []
    for name in chosen:
        console.print(f"[bold]running {escape(name)}[/] ...")
        rows.extend(_load(directory, name).run(quick=quick))
    console.print(render(rows))
    if json_out:
        json_out.write_text(json.dumps([r.as_dict() for r in rows], indent=2))
    if plot:
        save_plot(rows, str(plot))
        console.print(f"chart saved to {plot}", markup=False)
