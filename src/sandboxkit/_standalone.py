"""The text of a program that runs inside a sandbox, with the shared helpers it imports written in.

A program that runs inside a sandbox (the kernel, the fork server, the Docker runner, a judge harness
part) is a real module: ruff and mypy read it, tests import it. It takes its shared helpers from
:mod:`sandboxkit._in_sandbox_std` with one ordinary import::

    from sandboxkit._in_sandbox_std import exit_code, read_exactly

The sandbox's ``python3`` cannot see sandboxkit, so :func:`standalone_source` replaces that line with
the definitions it names, and the definitions, module constants and standard-library imports those
use, in the helper module's order: the program that reaches the sandbox is still one standalone text,
and each helper has one source. The definitions are written without annotations or docstrings, so
they compile on any Python 3 an image has (no ``from __future__`` needed) and cost a run little to
compile; the rest of the program is sent as written.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

__all__ = ["HELPERS", "standalone_source"]

#: The helper module the programs import from.
HELPERS = "sandboxkit._in_sandbox_std"
_HELPERS_FILE = Path(__file__).with_name("_in_sandbox_std.py")
#: The one form of the import that is written in: names as they are, on one top-level line.
_IMPORT = re.compile(r"from sandboxkit\._in_sandbox_std import (?P<names>\w+(?:, *\w+)*)[ \t]*(?:#.*)?\n?\Z")


@functools.cache
def standalone_source(path: Path) -> str:
    """The text of the program at ``path``, with its import of :data:`HELPERS` replaced by their definitions.

    Found by its text, not by parsing the program (parsing the kernel and the fork server took 7 ms
    of every process that imports the subprocess backend): the import must be one top-level line.

    Raises:
        ValueError: the program imports from :data:`HELPERS` otherwise (a renaming, a star, a
            parenthesised list, an indented or a plain ``import``), or a name it has not.
    """
    text = path.read_text(encoding="utf-8")
    if HELPERS not in text:
        return text
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        statement = line.strip()
        if not statement.startswith((f"from {HELPERS} ", f"import {HELPERS}")):
            continue
        found = _IMPORT.match(line)
        if found is None:
            raise ValueError(
                f"{path.name}:{number + 1}: import {HELPERS}'s names in one top-level line, as they are "
                f"(from {HELPERS} import a, b): the shipping writes their definitions in its place"
            )
        lines[number] = _definitions(tuple(name.strip() for name in found["names"].split(","))) + "\n"
    return "".join(lines)


#: Names of the helper module that are never written into a program.
_NOT_SHARED = frozenset({"TYPE_CHECKING", "__all__"})


@functools.cache
def _helpers() -> tuple[list[ast.stmt], dict[str, int]]:
    """The helper module's top-level statements, and the index of the one that binds each name."""
    body = ast.parse(_HELPERS_FILE.read_text(encoding="utf-8")).body
    binds: dict[str, int] = {}
    for index, stmt in enumerate(body):
        for name in _bound_names(stmt):
            if name not in _NOT_SHARED:
                binds.setdefault(name, index)
    return body, binds


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Import):
        return [(alias.asname or alias.name).partition(".")[0] for alias in stmt.names]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [stmt.target.id]
    if isinstance(stmt, ast.Assign):
        return [n.id for target in stmt.targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    return []


@functools.cache
def _shipped(index: int) -> tuple[str, frozenset[int]]:
    """Statement ``index`` as written into a program, and the statements it uses (by index)."""
    body, binds = _helpers()
    stmt = _bare(body[index])
    uses = {binds[n.id] for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in binds} - {index}
    return ast.unparse(stmt), frozenset(uses)


def _definitions(names: tuple[str, ...]) -> str:
    """The statements that define ``names`` and everything they use, in the helper module's order."""
    _, binds = _helpers()
    wanted: set[int] = set()
    todo = []
    for name in names:
        if name not in binds:
            raise ValueError(f"{HELPERS} has no shareable definition named {name!r}")
        todo.append(binds[name])
    while todo:
        index = todo.pop()
        if index not in wanted:
            wanted.add(index)
            todo.extend(_shipped(index)[1])
    return "\n".join(_shipped(index)[0] for index in sorted(wanted))


def _bare(stmt: ast.stmt) -> ast.stmt:
    """``stmt`` without the annotations Python evaluates (a signature's, a module variable's) or docstrings.

    In place: each statement is shipped once per process (``_shipped`` caches it). A function's
    local annotations stay; Python never evaluates them.
    """
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return ast.fix_missing_locations(ast.Assign(targets=[stmt.target], value=stmt.value, lineno=stmt.lineno))
    if isinstance(stmt, ast.FunctionDef):
        args = stmt.args
        stmt.returns = None
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                arg.annotation = None
        stmt.body = _without_docstring(stmt.body)
    elif isinstance(stmt, ast.ClassDef):
        stmt.body = [_bare(member) for member in _without_docstring(stmt.body)]
    return stmt


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:] or [ast.Pass()]
    return body
