"""The helpers shared by the programs that run inside a sandbox, and how they are shipped.

The kernel, the fork server, the Docker runner and the isolated judge harness each carried their own
copy of reading a frame exactly, of ``sys.exit``'s exit status, of turning non-dumpable and of the
head + tail output cut, each slightly different. They now import one module
(:mod:`sandboxkit._in_sandbox_std`), and :func:`sandboxkit._standalone.standalone_source` writes the
imported definitions into the text a sandbox runs. These tests keep one copy, and check that the
shipped text is standalone, runs on a bare interpreter and behaves like the module the host imports.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import _in_sandbox_std as std
from sandboxkit._standalone import standalone_source
from sandboxkit.backends.docker import _engine
from sandboxkit.backends.subprocess import _forkserver
from sandboxkit.judge import _harness_isolated
from sandboxkit.kernel import _client

SRC = Path(sandboxkit.__file__).parent
HELPERS = SRC / "_in_sandbox_std.py"
#: Every program that runs inside a sandbox, and the text that reaches it.
SHIPPED = {
    "kernel": _client.KERNEL_SOURCE,
    "fork server": _forkserver.SERVER_SOURCE,
    "docker runner": _engine.runner_source(),
    "isolated harness": _harness_isolated.SOURCE,
}
#: The names of the shared helpers, as a program's own copy would be named (with or without ``_``).
SHARED = {
    "read_exactly",
    "exit_code",
    "libc",
    "prctl",
    "set_dumpable",
    "cut_marker",
    "cut_head_tail",
    "head_tail_split",
}


#: The files of the programs that run inside a sandbox.
PROGRAMS = [
    SRC / "kernel" / "_kernel_main.py",
    SRC / "backends" / "subprocess" / "_server_main.py",
    SRC / "backends" / "docker" / "_runner.py",
    *sorted((SRC / "judge" / "_in_sandbox").glob("*.py")),
]


def _copies(path: Path) -> list[str]:
    """Where a program defines a shared helper again or calls prctl(PR_SET_DUMPABLE) itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in SHARED:
            found.append(f"{where} defines {node.name}")
        elif isinstance(node, ast.Call) and node.args and "prctl" in ast.unparse(node.func).lower():
            first = node.args[0]
            if (isinstance(first, ast.Constant) and first.value == 4) or "DUMPABLE" in ast.unparse(first):
                found.append(f"{where} calls prctl(PR_SET_DUMPABLE)")
    return found


def _cut_markers(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(SRC)}:{node.lineno} writes the cut marker"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and b"bytes cut ...]" in node.value
    ]


def test_no_program_keeps_its_own_copy_of_a_shared_helper() -> None:
    found = [hit for path in PROGRAMS for hit in _copies(path)]
    assert not found, "import these from sandboxkit._in_sandbox_std instead:\n" + "\n".join(found)


def test_the_cut_marker_is_written_in_one_place() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) if path != HELPERS for hit in _cut_markers(path)]
    assert not found, "use sandboxkit._in_sandbox_std.cut_marker:\n" + "\n".join(found)


@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_shipped_text_imports_nothing_of_sandboxkit_and_parses_as_python_3_8(name: str) -> None:
    tree = ast.parse(SHIPPED[name], feature_version=(3, 8))
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert not [m for m in imported if m and m.startswith("sandboxkit")], imported


@pytest.mark.parametrize("name", list(SHIPPED))
def test_each_helper_is_written_into_the_shipped_text_once(name: str) -> None:
    tree = ast.parse(SHIPPED[name])
    defined = [node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    shared = [d for d in defined if d in SHARED | {"HeadTail"}]
    assert shared, f"the {name} uses no shared helper"
    assert len(shared) == len(set(shared)), shared


_PROBE = """\
import os, sys
from sandboxkit._in_sandbox_std import HeadTail, cut_head_tail, exit_code, read_exactly, set_dumpable

acc = HeadTail(10, 0.3)
for chunk in (b"0123456789", b"abcdefghij", b"ABCDE"):
    acc.feed(chunk)
r, w = os.pipe()
os.write(w, b"frame+rest")
print(repr([
    cut_head_tail(b"x" * 25, 10, 0.3), (acc.value(), acc.truncated),
    [exit_code(c) for c in (None, 0, 3, 257, -1)],
    read_exactly(r, 5), os.read(r, 100),
    set_dumpable(False), set_dumpable(True),
]))
os.close(w)
try:
    read_exactly(r, 1)
except EOFError:
    sys.exit("eof")
"""


def test_a_shipped_program_runs_on_a_bare_interpreter_like_the_module_on_the_host(tmp_path: Path) -> None:
    program = tmp_path / "probe.py"
    program.write_text(_PROBE)
    # -I -S: no sandboxkit on the path (its editable install lives in site-packages), as in a sandbox.
    ran = subprocess.run(
        [sys.executable, "-I", "-S", "-c", standalone_source(program)], capture_output=True, text=True, timeout=60
    )
    acc = std.HeadTail(10, 0.3)
    for chunk in (b"0123456789", b"abcdefghij", b"ABCDE"):
        acc.feed(chunk)
    expected = [
        std.cut_head_tail(b"x" * 25, 10, 0.3),
        (acc.value(), acc.truncated),
        [0, 0, 3, 1, 255],
        b"frame",
        b"+rest",
        True,
        True,
    ]
    assert (ran.returncode, ran.stdout, ran.stderr) == (1, repr(expected) + "\n", "eof\n")


def test_read_exactly_leaves_what_follows_and_says_when_the_writer_stopped_short() -> None:
    r, w = os.pipe()
    try:
        os.write(w, b"abcdef")
        assert std.read_exactly(r, 4) == b"abcd"
        os.close(w)
        with pytest.raises(EOFError, match="2 of 3 bytes"):
            std.read_exactly(r, 3)
    finally:
        os.close(r)


def test_exit_code_prints_a_non_integer_code_like_python(capsys: pytest.CaptureFixture[str]) -> None:
    assert std.exit_code("bye") == 1
    assert capsys.readouterr().err == "bye\n"


@pytest.mark.parametrize(
    "program",
    [
        "import sandboxkit._in_sandbox_std\n",
        "from sandboxkit._in_sandbox_std import exit_code as code\n",
        "from sandboxkit._in_sandbox_std import *\n",
        "def f():\n    from sandboxkit._in_sandbox_std import exit_code\n",
        "from sandboxkit._in_sandbox_std import TYPE_CHECKING\n",
        "from sandboxkit._in_sandbox_std import no_such_helper\n",
    ],
)
def test_an_import_the_shipping_cannot_write_in_is_refused(tmp_path: Path, program: str) -> None:
    path = tmp_path / "program.py"
    path.write_text(program)
    with pytest.raises(ValueError, match="_in_sandbox_std"):
        standalone_source(path)


def test_a_program_gets_only_what_it_imports_and_what_that_uses(tmp_path: Path) -> None:
    path = tmp_path / "program.py"
    path.write_text('"""Doc."""\nfrom sandboxkit._in_sandbox_std import set_dumpable\nset_dumpable(False)\n')
    text = standalone_source(path)
    defined = {node.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.FunctionDef)}
    assert defined == {"libc", "prctl", "set_dumpable"}
    assert text.startswith('"""Doc."""\n') and text.endswith("\nset_dumpable(False)\n")
    assert "->" not in text and ": int" not in text, "annotations are left out of the shipped text"
