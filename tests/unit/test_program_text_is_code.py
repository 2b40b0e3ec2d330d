"""Programs that run inside a sandbox are files, not string literals the linter never reads.

A harness once lived in 2,000 lines of string literals: no linter, no highlighting, no review as
code. Its parts are now files (``judge/_in_sandbox``); these tests keep it that way and check that
the text reaching the sandbox is still exactly the files' text, so the move changed nothing there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sandboxkit
from sandboxkit.judge import _harness_isolated, _harness_source

#: Longer than this, a string is a program (or a document) and belongs in a file of its own.
MAX_LITERAL_LINES = 60

SRC = Path(sandboxkit.__file__).parent


def _long_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.end_lineno is not None:
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LITERAL_LINES:
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno} ({lines} lines)")
    return found


def test_no_string_literal_in_src_is_longer_than_60_lines() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in _long_literals(path)]
    assert not found, "move these programs into files of their own: " + ", ".join(found)


def test_every_harness_part_file_is_used_and_compiles() -> None:
    parts = sorted(p.stem for p in (SRC / "judge" / "_in_sandbox").glob("*.py") if p.stem != "__init__")
    users = "".join(
        (SRC / "judge" / name).read_text(encoding="utf-8") for name in ("_harness_source.py", "_harness_isolated.py")
    )
    assert parts
    for name in parts:
        assert f'program_text("{name}")' in users, f"{name}.py is sent nowhere"
        compile(_harness_source.program_text(name), name, "exec", dont_inherit=True)  # whole statements


def test_both_harnesses_share_one_copy_of_their_common_parts() -> None:
    # One text for reporting and killing processes, not a copy per harness.
    assert _harness_isolated.SOURCE.startswith(
        _harness_isolated.IMPORTS + _harness_source.REPORTING + _harness_source.program_text("isolated_head")
    )
    for shared in (_harness_source.REPORTING, _harness_source.PROCESSES):
        assert shared in _harness_source.CORE
        assert shared in _harness_isolated.SOURCE
        assert shared in _harness_isolated.LIBRARY
    for name in ("_report", "_exc_line", "_where"):
        assert _harness_isolated.SOURCE.count(f"def {name}(") == 1
        assert _harness_source.CORE.count(f"def {name}(") == 1
