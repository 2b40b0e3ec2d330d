"""The static runner: a Go build of the in-container runner that needs nothing from the image.

Why: the Python runner (``_runner.py``) needs a full ``python3`` (>= 3.8, with ``json`` and
``ctypes``) in the image, so an image holding only a static busybox, a Debian without Python,
``node:slim`` or ``golang`` cannot run it. The static runner (``runner/*.go``, shipped as
package data) speaks the same protocol, is built once with ``CGO_ENABLED=0 go build`` into a
cache keyed by the hash of its source (a changed source is rebuilt, never run stale), and is
bind-mounted read-only into each container at :data:`MOUNT_PATH`.

``$SANDBOXKIT_RUNNER_BIN`` names a prebuilt binary instead (a machine without Go: build it
elsewhere with ``go build`` in the ``runner`` folder, for the engine's architecture).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["MOUNT_PATH", "RUNNER_BIN_ENV", "StaticRunnerUnavailable", "find_go", "source_hash", "static_runner"]

log = logging.getLogger(__name__)

RUNNER_BIN_ENV = "SANDBOXKIT_RUNNER_BIN"
CACHE_ENV = "SANDBOXKIT_CACHE_DIR"
#: Where the binary appears inside a container (a read-only bind mount of one file).
MOUNT_PATH = "/.sandboxkit-runner"
SOURCE_DIR = Path(__file__).with_name("runner")
BUILD_TIMEOUT_S = 600


class StaticRunnerUnavailable(Exception):
    """No static runner can be had here; the text says what to do."""


def source_hash() -> str:
    """A digest of the runner's source files (names and bytes): the cache key of the binary."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE_DIR.glob("*")):
        if path.suffix == ".go" or path.name == "go.mod":
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """``$SANDBOXKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/sandboxkit``, else ``~/.cache/sandboxkit``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sandboxkit"


def find_go() -> str | None:
    """The ``go`` command: on PATH, or where Debian's golang-go puts it."""
    found = shutil.which("go")
    if found:
        return found
    for candidate in sorted(Path("/usr/lib").glob("go*/bin/go"), reverse=True):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _prebuilt() -> Path | None:
    named = os.environ.get(RUNNER_BIN_ENV)
    if not named:
        return None
    path = Path(named)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise StaticRunnerUnavailable(f"{RUNNER_BIN_ENV}={named!r} is not an executable file")
    return path.resolve()


def static_runner(*, build: bool = True) -> Path:
    """The path of a static runner binary for this source, building it if needed (and allowed).

    Concurrent callers (several processes of one machine) build it once: the build holds a lock
    file and publishes the binary with an atomic rename.

    Raises:
        StaticRunnerUnavailable: no prebuilt binary, no cached one and no Go toolchain (or the build failed).
    """
    prebuilt = _prebuilt()
    if prebuilt is not None:
        return prebuilt
    folder = cache_dir() / "runner"
    target = folder / f"sandboxkit-runner-{source_hash()}-{platform.machine() or 'unknown'}"
    if target.is_file():
        return target
    go = find_go() if build else None
    if go is None:
        raise StaticRunnerUnavailable(
            f"no Go toolchain to build the static runner (install golang-go, or set {RUNNER_BIN_ENV} to a binary "
            f"built with `CGO_ENABLED=0 go build` in {SOURCE_DIR})"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            _build(go, folder, target)
    return target


def _build(go: str, folder: Path, target: Path) -> None:
    env = {
        **os.environ,
        "CGO_ENABLED": "0",
        "GO111MODULE": "on",
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "GOCACHE": str(folder / "go-build"),
        "GOPATH": str(folder / "gopath"),
    }
    tmp = tempfile.mkdtemp(prefix="build-", dir=folder)
    try:
        out = Path(tmp) / "runner"
        log.info("building the static runner with %s (once per source version)", go)
        try:
            done = subprocess.run(
                [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out), "."],
                cwd=SOURCE_DIR,
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StaticRunnerUnavailable(f"building the static runner failed: {exc}") from exc
        if done.returncode != 0:
            raise StaticRunnerUnavailable(f"building the static runner failed:\n{done.stderr[-2000:]}")
        out.chmod(0o755)  # the second stage runs it as the program's user
        os.replace(out, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
