"""The import direction of the layers in docs/architecture.md, pinned statically.

Every ``import`` statement under ``src/sandboxkit`` is read with :mod:`ast` (lazy imports inside
functions and ``TYPE_CHECKING`` blocks included, since a lazy import is still a dependency), and each
rule below is one test, so a failure names the rule, the importing module and what it imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sandboxkit

SRC = Path(sandboxkit.__file__).parent

#: Layers from the top down, as drawn in docs/architecture.md. A module may import its own layer
#: or any layer below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("integrations",),
    ("server",),
    ("judge", "testing", "benchmarking"),
    (
        "pool",
        "session",
        "checkpoint",
        "sync",
        "_request",
        "_slots",
        "_lease",
        "_capacity",
        "_signals",
        "_started",
        "limiter",
        "metrics",
        "distributed",
        "prometheus",
        "_workers",
    ),
    ("registry", "hookspecs", "backends._plugins", "_workers._spec", "spillover"),
    ("backends",),
    ("protocols", "base", "streaming", "kernel"),
    ("models", "errors", "languages", "_plan", "output", "configs", "_in_sandbox_std", "_standalone", "_watchdog"),
    ("_watchdog_process",),  # the watchdog's own process: standard library only
)

#: What a backend may import from sandboxkit besides its own package (and third-party SDKs); ``configs``:
#: its constructor takes its options model.
BACKEND_MAY_IMPORT = (
    "_watchdog",
    "models",
    "errors",
    "languages",
    "_plan",
    "base",
    "output",
    "protocols",
    "streaming",
    "kernel",
    "configs",
    "_in_sandbox_std",
    "_standalone",
)
#: What a wire protocol may import from sandboxkit.
PROTOCOL_MAY_IMPORT = ("models", "errors", "languages", "output")
#: Trainer frameworks: only integrations/ adapts to them (and distributed/ runs on Ray).
TRAINERS = {"trl": (), "verl": (), "rllm": (), "ray": ("distributed",)}


@dataclass(frozen=True)
class Import:
    """One imported name, resolved to the module it comes from."""

    module: str  # the importing module, relative to sandboxkit ("backends.docker._sandbox")
    target: str  # absolute dotted name of what it imports ("sandboxkit.server.models", "httpx")
    line: int

    def __str__(self) -> str:
        return f"sandboxkit.{self.module} imports {self.target} (line {self.line})"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _exists(dotted: str, root: Path) -> bool:
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def imports_of(path: Path, root: Path = SRC) -> Iterator[Import]:
    """Every import in one file, with relative imports and ``from package import module`` resolved."""
    module = _module_name(path, root)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["sandboxkit", *package[: len(package) - (node.level - 1)]]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source == "__future__":
                continue
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                yield Import(module, candidate if _exists(candidate, root) else source, node.lineno)


def all_imports(root: Path = SRC) -> list[Import]:
    return [imp for path in sorted(root.rglob("*.py")) for imp in imports_of(path, root)]


def _internal(target: str) -> str | None:
    """``sandboxkit.x.y`` -> ``x.y``; None for a third-party or stdlib name (and the root package)."""
    return target.removeprefix("sandboxkit.") if target.startswith("sandboxkit.") else None


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_of(name: str) -> int | None:
    """Index in :data:`LAYERS` (0 = top) of a module relative to sandboxkit; the longest prefix wins."""
    best: tuple[int, int] | None = None
    for index, members in enumerate(LAYERS):
        for member in members:
            if _within(name, (member,)) and (best is None or len(member) > best[1]):
                best = (index, len(member))
    return None if best is None else best[0]


# ---------------------------------------------------------------------------- the rules


def layer_violations(imports: list[Import]) -> list[str]:
    bad = []
    for imp in imports:
        target = _internal(imp.target)
        if target is None or not imp.module:
            continue
        own, other = layer_of(imp.module), layer_of(target)
        if own is not None and other is not None and other < own:
            bad.append(f"{imp}: layer {LAYERS[own]} may not import the layer above, {LAYERS[other]}")
    return bad


def backend_violations(imports: list[Import]) -> list[str]:
    bad = []
    for imp in imports:
        target = _internal(imp.target)
        if target is None or not _within(imp.module, ("backends",)) or imp.module == "backends._plugins":
            continue
        parts = imp.module.split(".")
        own_package = ".".join(parts[:2]) if len(parts) > 2 else imp.module
        shared_private = target.startswith("backends._") and target != "backends._plugins"
        allowed = _within(target, BACKEND_MAY_IMPORT) or _within(target, (own_package,)) or shared_private
        if not allowed and target != "backends":
            bad.append(f"{imp}: a backend imports only {', '.join(BACKEND_MAY_IMPORT)} and its own package")
    return bad


def trainer_violations(imports: list[Import]) -> list[str]:
    bad = []
    for imp in imports:
        root = imp.target.split(".")[0]
        if root not in TRAINERS or _within(imp.module, ("integrations",)):
            continue
        if not _within(imp.module, TRAINERS[root]):
            bad.append(f"{imp}: only integrations/ imports a trainer ({root})")
    return bad


def cli_violations(imports: list[Import]) -> list[str]:
    return [
        f"{imp}: nothing outside cli/ imports cli/"
        for imp in imports
        if _within(_internal(imp.target) or "", ("cli",)) and not _within(imp.module, ("cli",))
    ]


def protocol_violations(imports: list[Import]) -> list[str]:
    bad = []
    for imp in imports:
        target = _internal(imp.target)
        if target is None or not _within(imp.module, ("protocols",)):
            continue
        if not _within(target, PROTOCOL_MAY_IMPORT) and not _within(target, ("protocols",)):
            bad.append(f"{imp}: a protocol imports only {', '.join(PROTOCOL_MAY_IMPORT)}")
    return bad


def _graph(imports: list[Import], root: Path) -> dict[str, set[str]]:
    """Module -> the modules (files) of sandboxkit it imports; a name imported from a module counts as that module."""
    modules = {_module_name(p, root) for p in root.rglob("*.py")} | {imp.module for imp in imports}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = _internal(imp.target)
        while target and target not in modules:  # ``pkg.mod.Name`` -> ``pkg.mod``
            target = target.rpartition(".")[0]
        if target is not None and target != imp.module:
            graph[imp.module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def circle_violations(imports: list[Import], root: Path = SRC) -> list[str]:
    """Files that import each other, directly or around a ring, lazily or for types only.

    ``TYPE_CHECKING`` and in-function imports count: a circle that only the type checker or a late
    import sees still means two files each need the other's insides to be understood or changed,
    which is what a layering hides behind a small interface (a Protocol, or a value handed over).
    A package's ``__init__`` is a file like any other: a module importing a name from its own
    package's ``__init__`` while that ``__init__`` re-exports the module is a circle too.
    """
    graph = _graph(imports, root)
    return [
        f"import circle: {' -> '.join(c)}: "
        + "; ".join(f"sandboxkit.{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in _circles(graph)
    ]


RULES = {
    "layers point down": layer_violations,
    "backends import only the core": backend_violations,
    "no trainer below integrations": trainer_violations,
    "nothing imports cli": cli_violations,
    "protocols import only the core": protocol_violations,
    "no import circles": circle_violations,
}


@pytest.mark.parametrize("rule", list(RULES))
def test_the_package_keeps_the_rule(rule: str) -> None:
    violations = RULES[rule](all_imports())
    assert not violations, "\n".join(violations)


def test_every_module_has_a_layer() -> None:
    """A new top-level module must be placed in LAYERS (and in the diagram), or the rules miss it."""
    modules = {_module_name(p, SRC) for p in SRC.rglob("*.py")} - {""}
    unplaced = sorted(m for m in modules if layer_of(m) is None and m != "__main__")
    assert not unplaced, f"add these to LAYERS and docs/architecture.md: {unplaced}"


def test_the_diagram_names_every_layer() -> None:
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    diagram = doc.split("```")[1]
    for members in LAYERS:
        assert any(member.split(".")[0] in diagram for member in members), members


# ---------------------------------------------------------------------------- the rules can fail

BREAKS = {
    "layers point down": ("judge/new.py", "from sandboxkit.server.app import create_app\n"),
    "backends import only the core": ("backends/sandbox_fusion.py", "from sandboxkit.server import app\n"),
    "no trainer below integrations": ("pool.py", "def f():\n    import verl.utils\n"),
    "nothing imports cli": ("server/app.py", "from sandboxkit.cli._common import fail\n"),
    "protocols import only the core": ("protocols/sandbox_fusion.py", "from sandboxkit.pool import SandboxPool\n"),
    "no import circles": ("errors.py", "if False:\n    from sandboxkit.pool import SandboxPool\n"),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_a_deliberate_bad_import_breaks_the_rule(rule: str, tmp_path: Path) -> None:
    """A copy of the package with one bad import added: the rule must name it."""
    root = tmp_path / "sandboxkit"
    for path in SRC.rglob("*.py"):
        dest = root / path.relative_to(SRC)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(path.read_text())
    relative, line = BREAKS[rule]
    target = root / relative
    target.write_text((target.read_text() if target.exists() else "") + "\n" + line)
    violations = RULES[rule](all_imports(root))
    assert violations and all(relative.removesuffix(".py").replace("/", ".") in v for v in violations), violations
