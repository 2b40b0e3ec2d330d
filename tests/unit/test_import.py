"""`import sandboxkit` stays light: no optional SDK, and at most 1.3x its core dependencies' import."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

OPTIONAL = [
    "docker",
    "daytona",
    "e2b",
    "fastapi",
    "uvicorn",
    "trl",
    "verl",
    "ray",
    "torch",
    "transformers",
    "typer",
    "rich",
    "matplotlib",
    "sandbox_fusion",
    "pytest",  # sandboxkit.testing needs it; plain `import sandboxkit` must not
    "hypothesis",
]


def test_import_pulls_in_no_optional_sdk() -> None:
    code = f"import sys, sandboxkit; print(__import__('json').dumps([m for m in {OPTIONAL!r} if m in sys.modules]))"
    loaded = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert loaded == []


def _import_time(modules: str) -> float:
    code = f"import time; t = time.perf_counter(); import {modules}; print(time.perf_counter() - t)"
    return float(subprocess.check_output([sys.executable, "-X", "frozen_modules=on", "-c", code], text=True))


def test_import_cost_is_at_most_1_3x_core_dependencies() -> None:
    # Side by side, interleaved, median of several fresh interpreters: a ratio, not a timing.
    ours, base = [], []
    for _ in range(7):
        base.append(_import_time("pydantic, httpx, pluggy"))
        ours.append(_import_time("sandboxkit"))
    ratio = statistics.median(ours) / statistics.median(base)
    assert ratio <= 1.3, f"import sandboxkit costs {ratio:.2f}x its core dependencies"


def test_testing_public_names() -> None:
    import sandboxkit.testing as testing

    assert testing.__all__ == ["BackendConformance", "FakeBackend", "FakeSandbox"]
    assert all(hasattr(testing, name) for name in testing.__all__)
    from sandboxkit.testing.conformance import AttackTests, ContractTests, LimitTests, SemanticsTests

    for group in (SemanticsTests, ContractTests, LimitTests, AttackTests):
        assert issubclass(testing.BackendConformance, group)
