"""Fill an offline Go module cache from Debian's Go source packages (run by scripts/toolchains.sh).

Sandbox Fusion builds every Go program inside a module whose ``go.mod`` requires testify & co., with the
modules pre-downloaded in its image. The Go module proxy is not reachable from these machines, but Debian
ships the same libraries as source trees (``/usr/share/gocode/src``, GOPATH layout). This script turns those
trees into modules the ``go`` command can resolve with the network off:

1. a throw-away file proxy (``GOPROXY=file://...``): per module ``@v/list``, ``.info``, ``.mod`` and a
   ``.zip`` in the module zip layout (``path@version/...``);
2. a build of a template module that imports them, which downloads every module into
   ``<prefix>/mod`` (the ``GOMODCACHE`` sandboxes read) and writes the template's ``go.mod`` / ``go.sum``.

Sandboxes then build with ``GOPROXY=off GOFLAGS=-mod=mod GOMODCACHE=<prefix>/mod`` and the template's
``go.mod`` in their workspace (``sandboxkit.languages``). Hashes in ``go.sum`` are those of Debian's trees,
which may differ from upstream's zips (Debian drops some files), and the go.mod of a version Debian does
not ship (objx 0.5.0 requires testify 1.8.0) is the shipped version's: graph metadata only, never built.

Usage: python3 go-module-cache.py PREFIX MODULE=VERSION[=DIR] ... (DIR defaults to /usr/share/gocode/src/MODULE).
The first module is the one the template requires; the others are what it needs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

GOCODE = "/usr/share/gocode/src"
#: What the template imports: every package of testify a test may use (assert, require, mock, suite).
TEMPLATE_MAIN = """package main

import (
\t_ "github.com/stretchr/testify/assert"
\t_ "github.com/stretchr/testify/mock"
\t_ "github.com/stretchr/testify/require"
\t_ "github.com/stretchr/testify/suite"
)

func main() {}
"""


def module_zip(path: str, version: str, src: str, out: str) -> None:
    """The module zip of the tree at ``src``: regular files under ``path@version/``, nested modules left out."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for root, dirs, files in os.walk(src):
            rel = os.path.relpath(root, src)
            # A subdirectory with its own go.mod is another module; vendor trees and VCS data are never part of one.
            dirs[:] = sorted(
                d for d in dirs if d not in {"vendor", ".git"} and not os.path.exists(os.path.join(root, d, "go.mod"))
            )
            for name in sorted(files):
                full = os.path.join(root, name)
                if os.path.islink(full) or not os.path.isfile(full):
                    continue
                arc = name if rel == "." else f"{rel}/{name}"
                zf.write(full, f"{path}@{version}/{arc}")


def add_module(proxy: str, path: str, version: str, src: str | None, go_mod: str) -> None:
    """One version of one module in the file proxy; ``src`` None: its go.mod only (graph metadata)."""
    base = os.path.join(proxy, path, "@v")
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, "list"), "a") as f:
        f.write(version + "\n")
    with open(os.path.join(base, f"{version}.info"), "w") as f:
        json.dump({"Version": version, "Time": "2023-01-01T00:00:00Z"}, f)
    with open(os.path.join(base, f"{version}.mod"), "w") as f:
        f.write(go_mod)
    if src is not None:
        module_zip(path, version, src, os.path.join(base, f"{version}.zip"))


def read_go_mod(path: str, src: str) -> str:
    try:
        with open(os.path.join(src, "go.mod")) as f:
            return f.read()
    except FileNotFoundError:
        return f"module {path}\n"  # a pre-modules library: Go itself synthesises the same


def requirements(go_mod: str) -> set[tuple[str, str]]:
    """The (module, version) pairs a go.mod requires (single-line and block form, quoted or not)."""
    found = set()
    block = False
    for raw in go_mod.splitlines():
        line = raw.split("//")[0].replace('"', "").strip()
        if block and line == ")":
            block = False
        elif line.startswith("require ("):
            block = True
        elif block or line.startswith("require "):
            words = line.removeprefix("require ").split()
            if len(words) == 2:
                found.add((words[0], words[1]))
    return found


def main(prefix: str, specs: list[str]) -> None:
    modules = []
    for spec in specs:
        path, version, *rest = spec.split("=")
        modules.append((path, version, rest[0] if rest else os.path.join(GOCODE, path)))
    work = tempfile.mkdtemp(prefix="sandboxkit-goproxy-")
    try:
        proxy = os.path.join(work, "proxy")
        shipped = {path: version for path, version, _ in modules}
        mods = {}
        for path, version, src in modules:
            mods[path] = read_go_mod(path, src)
            add_module(proxy, path, version, src, mods[path])
        # Versions the shipped go.mod files require but Debian does not ship (objx 0.5.0 requires testify 1.8.0):
        # the go.mod alone, which is all the module graph reads of them.
        for path, version in sorted({req for go_mod in mods.values() for req in requirements(go_mod)}):
            if shipped.get(path) != version:
                add_module(proxy, path, version, None, mods.get(path, f"module {path}\n"))
        template = os.path.join(work, "template")
        os.makedirs(template)
        with open(os.path.join(template, "main.go"), "w") as f:
            f.write(TEMPLATE_MAIN)
        with open(os.path.join(template, "go.mod"), "w") as f:
            f.write(f"module sandbox\n\ngo 1.19\n\nrequire {modules[0][0]} {modules[0][1]}\n")
        mod_cache = os.path.join(prefix, "mod")
        env = {
            **os.environ,
            "GOPROXY": "file://" + proxy,
            "GOSUMDB": "off",
            "GOFLAGS": "-mod=mod",
            "GO111MODULE": "on",
            "GOMODCACHE": mod_cache,
            "GOCACHE": os.path.join(work, "gocache"),
            "GOPATH": os.path.join(work, "gopath"),
            "GOTOOLCHAIN": "local",
        }
        # A build (not ``go mod tidy``, which wants the test imports of every dependency too) downloads what
        # the template's packages need and records their sums.
        subprocess.run(["go", "build", "-o", os.devnull, "."], cwd=template, env=env, check=True)
        # The template must build from the cache alone, exactly as a sandbox will.
        subprocess.run(["go", "build", "-o", os.devnull, "."], cwd=template, env={**env, "GOPROXY": "off"}, check=True)
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(os.path.join(template, name), os.path.join(prefix, name))
        # Sandboxes build in workspace mode over the template (GOWORK): their program needs no go.mod of its
        # own, and the build command stays a plain `go build` / `go test`.
        with open(os.path.join(prefix, "go.work"), "w") as f:
            f.write("go 1.19\n\nuse .\n")
    finally:
        subprocess.run(["chmod", "-R", "u+w", work], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
