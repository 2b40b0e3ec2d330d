"""The sandbox's working directory on the host: file I/O, wipe, and the scrubbed environment."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import check_relative_path

__all__ = ["SANDBOX_PATH", "Workspace", "program_env"]

#: PATH inside the sandbox. Not the host's: the host's may point into directories the
#: sandbox user cannot enter (``/root/.pyenv``) or that hold private tools.
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def program_env(home: str, path: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a program: PATH, HOME, LANG and what the caller passed.

    Nothing is inherited from the host process, so API keys in ``os.environ`` never reach
    untrusted code. A relative value containing ``/`` (``GOCACHE=.cache/go-build`` in the
    language table) is made absolute under ``home``, because toolchains reject relative caches.
    """
    env = {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp"}
    for key, value in (extra or {}).items():
        if "/" in value and not value.startswith("/") and ":" not in value:
            value = os.path.join(home, value)
        env[str(key)] = str(value)
    return env


class Workspace:
    """A directory on the host that one sandbox owns.

    Args:
        path: the directory (created by the caller, empty).
        owner: ``(uid, gid)`` the sandboxed program runs as, or ``None`` when it runs as us;
            files written from the host are given to that user so the program may change them.
    """

    def __init__(self, path: str, owner: tuple[int, int] | None = None) -> None:
        self.path = path
        self.owner = owner

    def resolve(self, rel: str, *, strict: bool = False) -> str:
        """Absolute host path of a workspace-relative path.

        The program may have planted symlinks pointing outside; the host never follows them.
        A top-level file name needs no check when opened with ``O_NOFOLLOW`` (as ``read`` and
        ``write`` do), which keeps the per-run source write cheap; ``strict`` checks anyway.

        Raises:
            InvalidRequest: the path is absolute, contains ``..`` or escapes through a symlink.
        """
        try:
            norm = check_relative_path(rel)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        full = os.path.join(self.path, norm)
        if not strict and "/" not in norm:
            return full
        real = os.path.realpath(full)
        if real != self.path and not real.startswith(self.path + os.sep):
            raise InvalidRequest(f"file path {rel!r} resolves outside the sandbox workspace through a symlink")
        return full

    def write(self, files: Mapping[str, bytes | str]) -> None:
        """Write files (parents created), owned by the sandbox user."""
        for rel, body in files.items():
            full = self.resolve(rel)
            data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
            parent = os.path.dirname(full)
            if parent != self.path:
                self._makedirs(parent)
            if os.path.islink(full):  # replace a link the program planted, never write through it
                os.unlink(full)
            elif os.path.isdir(full):
                shutil.rmtree(full)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                if self.owner is not None:
                    os.fchown(fd, *self.owner)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)

    def _makedirs(self, parent: str) -> None:
        rel_parts = os.path.relpath(parent, self.path).split(os.sep)
        cur = self.path
        for part in rel_parts:
            cur = os.path.join(cur, part)
            if os.path.islink(cur):
                os.unlink(cur)
            if not os.path.isdir(cur):
                os.mkdir(cur, 0o755)
                if self.owner is not None:
                    os.chown(cur, *self.owner)

    def read(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read regular files; missing ones (and symlinks, directories) are left out."""
        out: dict[str, bytes] = {}
        for rel in paths:
            full = self.resolve(rel)
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                import stat

                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                out[rel] = b"".join(chunks)
            finally:
                os.close(fd)
        return out

    def wipe(self) -> None:
        """Remove everything inside the workspace, keeping the directory itself."""
        with os.scandir(self.path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    try:
                        os.unlink(entry.path)
                    except FileNotFoundError:
                        pass

    def remove(self) -> None:
        """Delete the workspace directory. Idempotent."""
        shutil.rmtree(self.path, ignore_errors=True)
