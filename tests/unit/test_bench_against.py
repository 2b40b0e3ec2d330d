"""scripts/bench-against.py pairs rows of two trees and orients every ratio so that > 1 means faster."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench-against.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_against", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(case: str, *, throughput: float | None = None, median_ms: float = 0.0) -> dict[str, Any]:
    return {"benchmark": "b", "case": case, "throughput": throughput, "median_ms": median_ms}


def test_ratios_are_medians_over_rounds_and_oriented_by_the_figure_of_merit() -> None:
    compare = _script().compare
    base = [
        [_row("rate", throughput=100.0), _row("lat", median_ms=2.0)],
        [_row("rate", throughput=300.0), _row("lat", median_ms=4.0)],
        [_row("rate", throughput=200.0), _row("lat", median_ms=3.0)],
    ]
    head = [[_row("rate", throughput=100.0), _row("lat", median_ms=6.0)]]
    pairs = {p["case"]: p for p in compare(base, head)["pairs"]}
    assert pairs["rate"]["base"] == 200.0 and pairs["rate"]["ratio"] == 0.5  # half the throughput: slower
    assert pairs["lat"]["unit"] == "ms" and pairs["lat"]["ratio"] == 0.5  # twice the latency: slower
    assert pairs["rate"]["unit"] == "ops/s"


def test_rows_of_one_tree_only_are_listed_not_compared() -> None:
    result = _script().compare([[_row("old", throughput=1.0)]], [[_row("new", throughput=1.0), _row("none")]])
    assert result["pairs"] == []
    assert result["only_base"] == ["b / old"] and result["only_head"] == ["b / new"]


def test_a_row_without_a_figure_is_not_compared_rather_than_divided_by_zero() -> None:
    result = _script().compare([[_row("x", throughput=5.0)]], [[_row("x", median_ms=0.0, throughput=0.0)]])
    assert result["pairs"] == [] and result["only_base"] == ["b / x"]
