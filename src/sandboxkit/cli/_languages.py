"""``sandboxkit doctor``'s language table: which toolchains exist *inside* each local sandbox.

Checked where programs run, not on the host's PATH: the subprocess sandbox has its own PATH (the
venv's binaries are invisible to it), and the Docker image has its own packages. One ``exec`` in a
Docker sandbox checks every language at once, so the table costs one container start.
"""

from __future__ import annotations

import asyncio
import shlex

from sandboxkit.errors import SandboxkitError
from sandboxkit.languages import LANGUAGES, Language
from sandboxkit.models import Limits

__all__ = ["docker_languages", "presence_script", "subprocess_languages"]


def presence_script() -> str:
    """A shell script printing the name of every language whose binaries and files are all present."""
    lines = []
    for lang in LANGUAGES.values():
        checks = [f"command -v {shlex.quote(b)} >/dev/null" for b in lang.binaries]
        checks += [f"{{ test -f {shlex.quote(f)} || test -c {shlex.quote(f)}; }}" for f in lang.files]
        lines.append(f"{' && '.join(checks) or 'true'} && echo {shlex.quote(lang.name)}")
    return "\n".join(lines) + "\ntrue\n"


def subprocess_languages() -> dict[str, bool] | str:
    """Language name → toolchain present inside a subprocess sandbox, or why it cannot be checked."""
    from sandboxkit.backends.subprocess import SubprocessBackend

    try:
        backend = SubprocessBackend()
    except SandboxkitError as exc:
        return str(exc)
    return {name: backend.has_toolchain(lang) for name, lang in LANGUAGES.items()}


def docker_languages() -> dict[str, bool] | str:
    """Language name → toolchain present in the Docker backend's image, or why it cannot be checked."""
    try:
        from sandboxkit.backends.docker import DockerBackend
    except ImportError as exc:
        return f"the docker backend cannot be imported ({exc})"
    availability = DockerBackend.availability()
    if not availability.usable:
        return availability.reason

    async def check() -> set[str]:
        backend = DockerBackend()
        try:
            sandbox = await backend.open(Limits(timeout_s=60.0))
            try:
                result = await sandbox.exec(presence_script(), timeout=60.0)
            finally:
                await sandbox.close()
        finally:
            await backend.aclose()
        return set(result.stdout.split())

    try:
        present = asyncio.run(check())
    except SandboxkitError as exc:
        return str(exc)
    return {name: name in present for name in LANGUAGES}


def how_to_get(lang: Language) -> str:
    """What ``doctor`` prints for a missing toolchain: how to install it."""
    return lang.install_hint
