"""Files between the host and a sandboxkit session, the way Harbor's ``upload_*`` / ``download_*`` move them.

Harbor copies its own directories in (``tests/``, ``solution/``, agent installers) and the
sandbox's out (``/logs/verifier``, ``/logs/agent``, artifacts). Going in, the host's files are
Harbor's and are trusted; going out, every name and every byte is the sandbox's, so:

* the list of files comes from the sandbox's own ``find`` and is only a list of *names*: each
  one is read back with the backend's file API, which never follows a link out of the sandbox
  (a name that is a link, a fifo or is gone is simply not delivered);
* a name is kept only when it is a clean relative path (no ``..``, no empty or absolute part),
  so nothing lands outside the target directory on the host;
* on the host, directories are created by us and files opened with ``O_NOFOLLOW`` below a
  target directory the sandbox cannot reach, so a download never writes through a link.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import stat
from pathlib import Path

from sandboxkit.session import Session

__all__ = ["MAX_DOWNLOAD_FILES", "download_tree", "upload_tree"]

#: The most files one ``download_dir`` brings back; a sandbox listing more is cut (logged by the caller).
MAX_DOWNLOAD_FILES = 20_000
#: Files read back per call (one round trip each batch; bounded so one call stays small).
_READ_BATCH = 64
#: Seconds the listing and ``mkdir`` / ``chmod`` steps may take in the sandbox.
STEP_TIMEOUT_S = 120.0


async def upload_tree(session: Session, source: Path, target: str) -> None:
    """Copy the host directory ``source`` to ``target`` in the sandbox, keeping empty folders and exec bits.

    The file API writes plain ``0644`` files; Harbor's scripts (``solve.sh``, agent
    installers) may rely on their executable bit, so it is restored with one ``chmod``.
    """
    files: dict[str, bytes] = {}
    dirs = [target]
    executable: list[str] = []
    for folder, subdirs, names in os.walk(source, followlinks=False):
        rel = Path(folder).relative_to(source).as_posix()
        base = posixpath.normpath(posixpath.join(target, rel))
        dirs.extend(posixpath.join(base, name) for name in subdirs)
        for name in names:
            host = Path(folder, name)
            if not host.is_file():
                continue
            files[posixpath.join(base, name)] = host.read_bytes()
            if host.stat().st_mode & stat.S_IXUSR:
                executable.append(posixpath.join(base, name))
    await session.exec(["mkdir", "-p", *dirs], timeout_s=STEP_TIMEOUT_S)
    if files:
        await session.write_files(files)
    if executable:
        await session.exec(["chmod", "+x", *executable], timeout_s=STEP_TIMEOUT_S)


def clean_relative(name: str) -> str | None:
    """``name`` as a relative path below its directory, or ``None`` when it could leave it."""
    parts = name.split("/")
    if parts and parts[0] == ".":
        parts = parts[1:]
    if not parts or any(part in ("", ".", "..") or "\0" in part for part in parts):
        return None
    return "/".join(parts)


async def list_files(session: Session, source: str) -> list[str]:
    """Relative names of the regular files below ``source`` in the sandbox (its ``find``; names only)."""
    listed = await session.exec(f"cd {shlex.quote(source)} && find . -type f -print0", timeout_s=STEP_TIMEOUT_S)
    if listed.exit_code != 0:
        raise FileNotFoundError(f"{source} is not a readable directory in the sandbox: {listed.stderr[-300:]!r}")
    names = (clean_relative(name) for name in listed.stdout.split("\0") if name)
    return sorted({name for name in names if name is not None})[:MAX_DOWNLOAD_FILES]


def write_below(root: Path, rel: str, body: bytes) -> None:
    """Write ``body`` to ``root/rel`` on the host, creating folders, never through a link."""
    folder = root
    for part in rel.split("/")[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise OSError(f"{folder} is a symbolic link; a download never writes through one")
        folder.mkdir(exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(folder / rel.split("/")[-1], flags, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(body)


async def download_tree(session: Session, source: str, target: Path) -> int:
    """Copy the regular files below ``source`` in the sandbox to the host directory ``target``; returns how many.

    Raises:
        FileNotFoundError: ``source`` is not a directory the sandbox can enter.
    """
    names = await list_files(session, source)
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for start in range(0, len(names), _READ_BATCH):
        batch = names[start : start + _READ_BATCH]
        paths = {posixpath.join(source, name): name for name in batch}
        for path, body in (await session.read_files(list(paths))).items():
            write_below(target, paths[path], body)
            copied += 1
    return copied
