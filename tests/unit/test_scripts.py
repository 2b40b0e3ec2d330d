"""The set-up scripts check what they installed (issue 32.1), on the real npm tree ``bootstrap.sh --all`` installed.

A recorded list of packages (the old stamp file) proves nothing about the files: a tree whose ``node`` wrapper
lost its execute bit, or whose package was deleted, must be repaired by the next bootstrap, not skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import tomllib

from sandboxkit.languages import NODE_MODULES, NODE_PREFIX
from support.marks import missing

ROOT = Path(__file__).resolve().parents[2]
#: The tree's own list of packages: the test asks for exactly what the bootstrap installed.
INSTALLED = Path(NODE_PREFIX) / "package.json"


def _npm_tree_copy(tmp_path: Path) -> Path:
    """A prefix that looks like one bootstrap left: the real modules (linked), a stamp, a wrapper of mode 644."""
    if not INSTALLED.is_file() or shutil.which("npm") is None:
        missing(f"the npm tree of bash scripts/bootstrap.sh --all ({NODE_PREFIX}) or npm")
    prefix = tmp_path / "node"
    prefix.mkdir()
    for name in ("package.json", "package-lock.json"):
        shutil.copy(Path(NODE_PREFIX) / name, prefix / name)
    (prefix / "node_modules").symlink_to(NODE_MODULES)
    (prefix / "bin").mkdir()
    wrapper = prefix / "bin" / "node"
    wrapper.write_text('#!/bin/sh\nexec node "$@"\n')
    wrapper.chmod(0o644)  # what printf + chmod -R a+rX left before the fix
    (prefix / ".sandboxkit-packages").write_text(_packages() + "\n")
    return prefix


def _toolchains(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` run after sourcing scripts/toolchains.sh, with ``env`` instead of the caller's SANDBOXKIT_*."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; . scripts/toolchains.sh; {script}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=clean | env,
        timeout=120,
    )


def _packages() -> str:
    """The npm list toolchains.sh installs by default (read from the script, the one source)."""
    return _toolchains('printf %s "$SANDBOXKIT_SANDBOX_NPM_PACKAGES"').stdout


def _install(prefix: Path) -> subprocess.CompletedProcess[str]:
    # No registry and an empty cache: a complete tree must be repaired offline, without `npm install`.
    return _toolchains(
        "install_sandbox_npm_packages",
        SANDBOXKIT_NODE_PREFIX=str(prefix),
        npm_config_offline="true",
        npm_config_cache=str(prefix.parent / "npm-cache"),
    )


def test_npm_install_repairs_a_node_wrapper_that_cannot_execute(tmp_path: Path) -> None:
    prefix = _npm_tree_copy(tmp_path)
    done = _install(prefix)
    assert done.returncode == 0, done.stderr
    wrapper = prefix / "bin" / "node"
    mode = wrapper.stat().st_mode
    assert mode & stat.S_IXOTH and mode & stat.S_IXUSR, f"wrapper mode {oct(mode)}: sandboxes cannot start node"
    ran = subprocess.run([str(wrapper), "-e", "console.log(6 * 7)"], capture_output=True, text=True, timeout=60)
    assert ran.stdout == "42\n", ran.stderr


def test_npm_install_does_not_trust_its_stamp_when_a_package_is_gone(tmp_path: Path) -> None:
    prefix = _npm_tree_copy(tmp_path)
    # The stamp still lists lodash; the tree no longer has it (offline, so reinstalling must fail loudly).
    (prefix / "node_modules").unlink()
    (prefix / "node_modules").mkdir()
    done = _install(prefix)
    assert done.returncode != 0
    assert "lodash@4.17.21" in done.stderr


def test_an_empty_npm_list_installs_nothing(tmp_path: Path) -> None:
    done = _toolchains(
        "install_sandbox_npm_packages",
        SANDBOXKIT_NODE_PREFIX=str(tmp_path / "node"),
        SANDBOXKIT_SANDBOX_NPM_PACKAGES="",
    )
    assert done.returncode == 0 and not (tmp_path / "node").exists()


def test_requires_python_starts_at_the_oldest_tested_version() -> None:
    # scripts/python-versions.sh tests what the classifiers name; requires-python must not promise more
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    versions = sorted(
        (int(m.group(1)), int(m.group(2)))
        for c in project["classifiers"]
        if (m := re.fullmatch(r"Programming Language :: Python :: (\d+)\.(\d+)", c))
    )
    assert versions and project["requires-python"] == f">={versions[0][0]}.{versions[0][1]}"
    assert "bash scripts/python-versions.sh" in (ROOT / ".ci" / "run").read_text().splitlines()
