"""The component-skip helpers in ``tests/support/marks.py`` are used the way they work.

``requires(...)`` builds a *decorator*: called as a statement inside a test body it does nothing,
so a ``pytest.skip`` after it skips even under CI=true and hides a missing component. Inside a
body the helper is ``missing(...)``. This scan keeps the mistake from coming back.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _discarded_requires_calls(tree: ast.AST) -> list[int]:
    """Lines where ``requires(...)`` is called as a bare statement (its decorator thrown away)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name == "requires":
                lines.append(node.lineno)
    return lines


def test_no_test_calls_requires_as_a_statement() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in _discarded_requires_calls(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, f"requires(...) as a statement does nothing; call missing(reason) instead: {found}"


def test_the_scan_finds_the_mistake() -> None:
    body = "def test_x():\n    if not ok:\n        requires(False, 'docker')\n        pytest.skip('docker')\n"
    assert _discarded_requires_calls(ast.parse(body)) == [3]
