"""`import sandboxkit` stays light: no optional SDK, and a bounded number of modules over its core dependencies."""

from __future__ import annotations

import json
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


#: What ``import sandboxkit`` may add on top of its core dependencies (pydantic, httpx, pluggy): its own
#: modules and the stdlib's asyncio, subprocess... A count, not a timing, so a loaded machine cannot make it
#: flaky; the import-time ratio (<= 1.3x the core dependencies) is ``sandboxkit bench import``.
MODULE_BUDGET = 130


def test_import_adds_a_bounded_number_of_modules_to_its_core_dependencies() -> None:
    code = (
        "import sys; import pydantic, httpx, pluggy; base = set(sys.modules); import sandboxkit; "
        "print(__import__('json').dumps(sorted(set(sys.modules) - base)))"
    )
    added = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert any(m.startswith("sandboxkit") for m in added)
    assert len(added) <= MODULE_BUDGET, f"import sandboxkit adds {len(added)} modules: {added}"


def test_testing_public_names() -> None:
    import sandboxkit.testing as testing

    assert testing.__all__ == ["BackendConformance", "FakeBackend", "FakeSandbox"]
    assert all(hasattr(testing, name) for name in testing.__all__)
    from sandboxkit.testing.conformance import AttackTests, ContractTests, LimitTests, SemanticsTests

    for group in (SemanticsTests, ContractTests, LimitTests, AttackTests):
        assert issubclass(testing.BackendConformance, group)
