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
from pathlib import Path

__all__ = ["HELPERS", "standalone_source"]

#: The helper module the programs import from.
HELPERS = "sandboxkit._in_sandbox_std"
_HELPERS_FILE = Path(__file__).with_name("_in_sandbox_std.py")


@functools.cache
def standalone_source(path: Path) -> str:
    """The text of the program at ``path``, with its import of :data:`HELPERS` replaced by their definitions.

    Raises:
        ValueError: the program imports from :data:`HELPERS` other than as ``from ... import a, b``
            at its top level (a renaming, a star, a nested import), or a name it has not.
    """
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name == HELPERS for alias in node.names):
            raise ValueError(f"{path.name}: import names from {HELPERS} (from {HELPERS} import ...), not the module")
        if isinstance(node, ast.ImportFrom) and node.module == HELPERS and node not in tree.body:
            raise ValueError(f"{path.name}: import from {HELPERS} only at the top level (it is written in there)")
    lines = text.splitlines(keepends=True)
    for node in reversed(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == HELPERS:
            if any(alias.asname is not None or alias.name == "*" for alias in node.names):
                raise ValueError(f"{path.name}: import {HELPERS}'s names as they are, without 'as' or '*'")
            names = tuple(alias.name for alias in node.names)
            lines[node.lineno - 1 : node.end_lineno] = [_definitions(names) + "\n"]
    return "".join(lines)


@functools.cache
def _helpers() -> tuple[list[ast.stmt], dict[str, ast.stmt]]:
    """The helper module's top-level statements, and which of them binds each name."""
    body = ast.parse(_HELPERS_FILE.read_text(encoding="utf-8")).body
    binds: dict[str, ast.stmt] = {}
    for stmt in body:
        for name in _bound_names(stmt):
            binds.setdefault(name, stmt)
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


def _definitions(names: tuple[str, ...]) -> str:
    """The statements that define ``names`` and everything they use, in the helper module's order."""
    body, binds = _helpers()
    wanted: set[int] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        stmt = binds.get(name)
        if stmt is None or name == "TYPE_CHECKING":
            raise ValueError(f"{HELPERS} has no shareable definition named {name!r}")
        if id(stmt) in wanted:
            continue
        wanted.add(id(stmt))
        for node in ast.walk(_bare(stmt)):
            if isinstance(node, ast.Name) and node.id in binds and node.id != name:
                todo.append(node.id)
    return "\n".join(ast.unparse(_bare(stmt)) for stmt in body if id(stmt) in wanted)


def _bare(stmt: ast.stmt) -> ast.stmt:
    """``stmt`` without annotations or docstrings (a copy: the parsed module is cached)."""
    stmt = _Strip().visit(ast.parse(ast.unparse(stmt)).body[0])
    return ast.fix_missing_locations(stmt)


class _Strip(ast.NodeTransformer):
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg):
            if arg is not None:
                arg.annotation = None
        node.body = _without_docstring(node.body)
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.body = _without_docstring(node.body)
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if node.value is None:  # a declaration only: nothing to run
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:] or [ast.Pass()]
    return body
