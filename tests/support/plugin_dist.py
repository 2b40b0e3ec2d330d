"""Install a test plugin distribution for the test session only, never into the user's environment.

``bootstrap.sh --all`` used to ``pip install -e`` the echo plugin into ``.venv``, so a new user's
``sandboxkit backends`` listed a backend that echoes code instead of running it. Now a test that
needs a third-party plugin builds its wheel here (a pure-Python src-layout project needs no build
backend: a wheel is a zip with a ``.dist-info``), installs it with pip into a temporary
``--target`` directory and puts that directory on ``sys.path`` for as long as it needs it, so
discovery goes through a real installed distribution's entry points, exactly as for a user.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandboxkit import registry

ECHO_PLUGIN = Path(__file__).resolve().parents[1] / "plugin" / "sandboxkit-echo-plugin"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(project: Path, out_dir: Path) -> Path:
    """Build a ``py3-none-any`` wheel of a pure-Python src-layout project from its pyproject.toml."""
    import tomllib

    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    name, version = meta["name"], meta["version"]
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted((project / "src").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(project / "src").as_posix()] = path.read_bytes()
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: sandboxkit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    groups = meta.get("entry-points", {})
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()) + "\n"
        for group, entries in groups.items()
    ).encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return wheel


def pip_install_target(project: Path, target: Path) -> None:
    """``pip install`` the project's wheel into ``target`` (offline, no dependencies)."""
    wheel = build_wheel(project, target.parent)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )


def _forget(prefix: str) -> None:
    for module in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[module]
    registry._pm = None  # rediscover entry points with the new sys.path
    registry._specs = None


@contextmanager
def on_sys_path(target: Path, package: str) -> Iterator[None]:
    """Make the distributions installed in ``target`` visible to this process (and to discovery)."""
    sys.path.insert(0, str(target))
    _forget(package)
    try:
        yield
    finally:
        sys.path.remove(str(target))
        _forget(package)
