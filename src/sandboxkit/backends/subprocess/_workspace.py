"""The sandbox's working directory on the host: file I/O, wipe, and the scrubbed environment.

Every host operation on a workspace assumes the program planted traps there between calls:
symlinks pointing out, FIFOs (an ``open`` for writing blocks until a reader comes, which on the
event-loop thread would freeze every sandbox of the process), sockets, device nodes, a file
where a directory is expected. So paths are opened with ``O_NOFOLLOW | O_NONBLOCK``, only
regular files and directories are used, and anything else in the way is removed first.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping, Sequence

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import check_relative_path

__all__ = ["SANDBOX_PATH", "Workspace", "program_env"]

BACKEND = "subprocess"

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

    def __init__(self, path: str, owner: tuple[int, int] | None = None, sandbox_id: str | None = None) -> None:
        self.path = path
        self.owner = owner
        self.sandbox_id = sandbox_id

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
            raise InvalidRequest(str(exc), backend=BACKEND, sandbox_id=self.sandbox_id) from exc
        full = os.path.join(self.path, norm)
        if not strict and "/" not in norm:
            return full
        real = os.path.realpath(full)
        if real != self.path and not real.startswith(self.path + os.sep):
            raise InvalidRequest(
                f"file path {rel!r} resolves outside the sandbox workspace through a symlink",
                backend=BACKEND,
                sandbox_id=self.sandbox_id,
            )
        return full

    def write(self, files: Mapping[str, bytes | str]) -> None:
        """Write files (parents created), owned by the sandbox user; never blocks.

        Raises:
            InvalidRequest: a bad path or text that is not valid Unicode.
            OSError: the workspace is full (ENOSPC) or gone.
        """
        encoded = [(self.resolve(rel), rel, self._encode(rel, body)) for rel, body in files.items()]
        for full, _, data in encoded:
            parent = os.path.dirname(full)
            if parent != self.path:
                self._makedirs(parent)
            fd = self._open_for_write(full)
            try:
                if self.owner is not None:
                    os.fchown(fd, *self.owner)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)

    def _encode(self, rel: str, body: bytes | str) -> bytes:
        if not isinstance(body, str):
            return bytes(body)
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequest(
                f"file {rel!r} is not valid Unicode text ({exc.reason} at position {exc.start}); "
                "pass bytes, or text without lone surrogates",
                backend=BACKEND,
                sandbox_id=self.sandbox_id,
            ) from None

    def _open_for_write(self, full: str) -> int:
        """Open ``full`` as a fresh regular file, removing whatever the program left in its place."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _ in range(3):
            _remove_unless_regular(full)
            try:
                fd = os.open(full, flags, 0o644)
            except OSError as exc:  # ELOOP/ENXIO/EISDIR: replaced between the check and the open
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EEXIST):
                    continue
                raise
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        raise OSError(errno.EBUSY, f"{full!r} keeps being replaced by something other than a regular file")

    def _makedirs(self, parent: str) -> None:
        rel_parts = os.path.relpath(parent, self.path).split(os.sep)
        cur = self.path
        for part in rel_parts:
            cur = os.path.join(cur, part)
            try:
                mode = os.lstat(cur).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISDIR(mode):  # a link, FIFO, file... in the way
                os.unlink(cur)
                mode = None
            if mode is None:
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


def _remove_unless_regular(path: str) -> None:
    """Remove ``path`` if it is anything but a regular file (a planted link, FIFO, socket, directory)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)
