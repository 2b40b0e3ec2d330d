#!/usr/bin/env python3
"""Run ``sandboxkit bench`` on this checkout and on an older commit, alternately, and compare row by row.

A refactor promises "speed unchanged". On a shared, noisy machine two runs minutes apart differ by more than
the 3% that promise allows, so both trees run in the same session, interleaved (base, head, head, base, ...),
and each row's figure of merit is the median over rounds. Each tree runs its own source and its own
``benchmarks/`` (``PYTHONPATH`` and ``SANDBOXKIT_BENCHMARKS``) with this checkout's interpreter and packages.

    .venv/bin/python scripts/bench-against.py 7367d46 pool subprocess --rounds 3
    .venv/bin/python scripts/bench-against.py HEAD~5 --full grade_humaneval --json out.json

Figure of merit per row: throughput where the row has one (higher is better), else the median latency
(lower is better). ``ratio`` is head's figure over base's, oriented so that > 1 means head is faster.
Rows present in only one tree (a renamed or new case) are listed, not compared. The load average is printed
before each run: a ratio measured at load 20 is weaker evidence than one at load 1.
Exit status: 0, or 1 when a benchmark failed in either tree or any compared row's ratio is below ``--floor``
(default 0.97).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
Key = tuple[str, str]


def merit(row: dict[str, Any]) -> tuple[float, bool] | None:
    """The row's figure of merit and whether higher is better; None when the row has neither figure."""
    if row.get("throughput"):
        return float(row["throughput"]), True
    if row.get("median_ms"):
        return float(row["median_ms"]), False
    return None


def compare(base_runs: list[list[dict[str, Any]]], head_runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Median each row's figure over the runs of each tree and pair the rows by (benchmark, case)."""

    def medians(runs: list[list[dict[str, Any]]]) -> dict[Key, tuple[float, bool]]:
        seen: dict[Key, list[float]] = {}
        higher: dict[Key, bool] = {}
        for rows in runs:
            for row in rows:
                figure = merit(row)
                if figure is None:
                    continue
                key = (str(row["benchmark"]), str(row["case"]))
                seen.setdefault(key, []).append(figure[0])
                higher[key] = figure[1]
        return {k: (statistics.median(v), higher[k]) for k, v in seen.items()}

    base, head = medians(base_runs), medians(head_runs)
    pairs = []
    for key in sorted(base.keys() & head.keys()):
        (b, higher), (h, _) = base[key], head[key]
        ratio = (h / b if higher else b / h) if b > 0 and h > 0 else float("nan")
        pairs.append(
            {
                "benchmark": key[0],
                "case": key[1],
                "base": b,
                "head": h,
                "unit": "ops/s" if higher else "ms",
                "ratio": ratio,
            }
        )
    return {
        "pairs": pairs,
        "only_base": sorted(" / ".join(k) for k in base.keys() - head.keys()),
        "only_head": sorted(" / ".join(k) for k in head.keys() - base.keys()),
    }


def run_tree(tree: Path, name: str, quick: bool, out: Path) -> list[dict[str, Any]] | str:
    """One ``sandboxkit bench NAME`` run of ``tree``'s source and benchmarks: its rows, or why it failed."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "SANDBOXKIT_BENCHMARKS": str(tree / "benchmarks")}
    env.pop("SANDBOXKIT_BASE_SRC", None)
    cmd = [sys.executable, "-m", "sandboxkit.cli", "bench", name, "--json", str(out), *(["--quick"] if quick else [])]
    print(f"  load {os.getloadavg()[0]:.1f}: {name} on {tree.name}", flush=True)
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        return f"{name} on {tree.name}: exit {proc.returncode}: {lines[-1] if lines else ''}"
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the base commit (anything git rev-parse accepts)")
    parser.add_argument("names", nargs="*", help="benchmarks (default: those both trees have)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree, interleaved (default 3)")
    parser.add_argument("--full", action="store_true", help="full runs instead of --quick")
    parser.add_argument("--floor", type=float, default=0.97, help="fail below this ratio (default 0.97)")
    parser.add_argument("--json", type=Path, help="write the comparison here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.rev], check=True)
        try:
            names = args.names or sorted(
                p.stem.removeprefix("bench_")
                for p in (base / "benchmarks").glob("bench_*.py")
                if (ROOT / "benchmarks" / p.name).exists()
            )
            # One process per benchmark and tree: a benchmark that fails (no Docker engine) loses only its rows.
            runs: dict[Path, list[list[dict[str, Any]]]] = {base: [], ROOT: []}
            failures: list[str] = []
            for i in range(args.rounds):
                order = (base, ROOT) if i % 2 == 0 else (ROOT, base)
                for name in names:
                    for tree in order:
                        got = run_tree(tree, name, not args.full, Path(tmp) / "rows.json")
                        if isinstance(got, str):
                            failures.append(got)
                        else:
                            runs[tree].append(got)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    result = compare(runs[base], runs[ROOT])
    print(f"\n{'benchmark':<18} {'case':<58} {'base':>11} {'head':>11} {'unit':<5} ratio")
    for p in result["pairs"]:
        flag = "" if p["ratio"] >= args.floor else "  <-- below floor"
        print(
            f"{p['benchmark']:<18} {p['case'][:58]:<58} {p['base']:>11.3f} {p['head']:>11.3f} {p['unit']:<5} "
            f"{p['ratio']:.3f}{flag}"
        )
    for side in ("only_base", "only_head"):
        for name in result[side]:
            print(f"{side.replace('_', ' in ')}: {name}")
    for failure in failures:
        print(f"failed: {failure}")
    if args.json:
        args.json.write_text(
            json.dumps({"rev": args.rev, "rounds": args.rounds, "failed": failures, **result}, indent=2)
        )
    return 1 if failures or any(p["ratio"] < args.floor for p in result["pairs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
