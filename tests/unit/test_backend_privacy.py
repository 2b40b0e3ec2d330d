"""The subprocess and Docker packages: no module reads another module's private attributes.

Fork, kernel, file transfer and process control reach a sandbox or backend through the small
surface it hands out (``SandboxHost``, ``ContainerHost``, ``HeldSandbox``, ``KernelLaunch``), so
a sandbox's private state can change without reading every friend file. Read statically: in each
module, every ``x._name`` whose ``x`` is not ``self``/``cls`` must name something that module itself
defines (an attribute it sets on ``self``, a function or a class), or belong to a library listed here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sandboxkit

PACKAGES = [Path(sandboxkit.__file__).parent / "backends" / name for name in ("subprocess", "docker")]
#: Receivers whose private names are a library's, not sandboxkit's (the in-sandbox programs' os._exit,
#: the docker SDK's low-level API object).
LIBRARIES = {"os", "sys", "atexit", "_ctypes", "api"}


def private_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own |= {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
    }
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        receiver = node.value
        root = receiver
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.value if not isinstance(root, ast.Call) else root.func
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            continue
        if node.attr in own or (isinstance(root, ast.Name) and root.id in LIBRARIES):
            continue
        bad.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return bad


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_module_reads_another_modules_private_state(package: Path) -> None:
    bad = [line for path in sorted(package.glob("*.py")) for line in private_reads(path)]
    assert not bad, "\n".join(bad)


def test_the_check_can_fail(tmp_path: Path) -> None:
    friend = tmp_path / "friend.py"
    friend.write_text("def f(sandbox):\n    async with sandbox._lock:\n        return sandbox._sdk(1)\n")
    assert private_reads(friend) == ["friend.py:2: sandbox._lock", "friend.py:3: sandbox._sdk"]
