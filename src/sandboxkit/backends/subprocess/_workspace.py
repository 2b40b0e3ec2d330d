"""The sandbox's working directory on the host: file I/O, wipe, and the scrubbed environment.

Every host operation on a workspace assumes the program planted traps there between calls:
symlinks pointing out, FIFOs (an ``open`` for writing blocks until a reader comes, which on the
event-loop thread would freeze every sandbox of the process), sockets, device nodes, a file
where a directory is expected; and that a process it keeps between calls (a kernel's thread)
swaps its directories for links while the host works. So every path is walked from the
workspace's fd with no link followed at any component (``_beneath``), files are opened
``O_NONBLOCK``, only regular files and directories are used, and anything else in the way is
removed first.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping, Sequence

from sandboxkit.backends.subprocess import _beneath as beneath
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

    Every operation opens the workspace once and walks from that fd (``_beneath``): the
    program may swap any directory of it for a link at any moment, and a link is never
    followed, at any component.

    Args:
        path: the directory (created by the caller, empty).
        owner: ``(uid, gid)`` the sandboxed program runs as, or ``None`` when it runs as us;
            files written from the host are given to that user so the program may change them.
        mode: the directory's permissions as the host made it, given back by :meth:`wipe` (a
            program may take its own write permission away, and the next tenant's with it);
            ``None``: left as found.
        anchor: a directory the host made above ``path`` (a root view's ``/``) when the
            components between them belong to the program (``/testbed``): ``path`` is then
            opened below ``anchor`` with no link followed, not by its host name.
    """

    def __init__(
        self,
        path: str,
        owner: tuple[int, int] | None = None,
        sandbox_id: str | None = None,
        anchor: str | None = None,
        mode: int | None = None,
    ) -> None:
        self.path = path
        self.mode = mode
        self.owner = owner
        self.sandbox_id = sandbox_id
        self.anchor = anchor

    def open_base(self) -> int:
        """A new fd of the workspace directory (the caller closes it).

        Raises:
            OSError: the workspace is gone, or (below an ``anchor``) a component is a link now.
        """
        if self.anchor is None or self.anchor == self.path:
            return beneath.open_dir(self.path)
        top = beneath.open_dir(self.anchor)
        try:
            return beneath.open_beneath(top, os.path.relpath(self.path, self.anchor), beneath.DIR_FLAGS)
        finally:
            os.close(top)

    def is_dir(self, host: str) -> bool:
        """Whether ``host`` (the workspace or a path below it, links already resolved) is a directory now.

        Walked by fd with no link followed: a directory swapped for a link to a host directory
        answers False, so the answer never tells anyone what exists on the host.
        """
        try:
            base = self.open_base()
        except OSError:
            return False
        try:
            if host == self.path:
                return True
            rel = os.path.relpath(host, self.path)
            os.close(beneath.open_beneath(base, rel, beneath.DIR_FLAGS))
            return True
        except OSError:
            return False
        finally:
            os.close(base)

    def _check(self, rel: str) -> str:
        try:
            return check_relative_path(rel)
        except ValueError as exc:
            raise InvalidRequest(str(exc), backend=BACKEND, sandbox_id=self.sandbox_id) from exc

    def resolve(self, rel: str, *, strict: bool = False) -> str:
        """Absolute host path of a workspace-relative path, for naming it (``exec``'s cwd), never for opening it.

        ``strict`` also refuses a path whose links lead outside the workspace now: the name is
        then handed to the sandbox (which resolves it in its own namespaces), not opened here.

        Raises:
            InvalidRequest: the path is absolute, contains ``..`` or (``strict``) escapes through a symlink.
        """
        norm = self._check(rel)
        full = os.path.join(self.path, norm)
        if not strict:
            return full
        try:
            real = os.path.realpath(full)
        except OSError:  # a link swapped for something else while it was read (EINVAL): the program's doing
            real = ""
        if real != self.path and not real.startswith(self.path + os.sep):
            raise InvalidRequest(
                f"file path {rel!r} resolves outside the sandbox workspace through a symlink",
                backend=BACKEND,
                sandbox_id=self.sandbox_id,
            )
        return full

    def write(self, files: Mapping[str, bytes | str]) -> None:
        """Write files (parents created), owned by the sandbox user; never blocks, never follows a link.

        Raises:
            InvalidRequest: a bad path, text that is not valid Unicode, or a path a process of the
                sandbox keeps replacing with a link while the host writes it (the program's doing).
            OSError: the workspace is full (ENOSPC) or gone.
        """
        encoded = [(rel, self._check(rel).split("/"), self._encode(rel, body)) for rel, body in files.items()]
        try:
            base = self.open_base()
        except OSError as exc:
            if exc.errno in beneath.RACED:
                raise self._raced("the working directory", exc) from exc
            raise
        try:
            for rel, parts, data in encoded:
                try:
                    fd = self._create(base, parts)
                except OSError as exc:
                    if exc.errno in beneath.RACED:
                        raise self._raced(repr(rel), exc) from exc
                    raise
                try:
                    if self.owner is not None:
                        os.fchown(fd, *self.owner)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
        finally:
            os.close(base)

    def _create(self, base: int, parts: list[str]) -> int:
        parent = beneath.make_dirs(base, parts[:-1], self.owner) if len(parts) > 1 else base
        try:
            return _open_for_write(parent, parts[-1])
        finally:
            if parent != base:
                os.close(parent)

    def _raced(self, what: str, exc: OSError) -> InvalidRequest:
        """The program changed a path while the host wrote it: its doing, reported to the caller as such."""
        return InvalidRequest(
            f"cannot write {what}: a process of the sandbox kept replacing it (or a directory on its way) "
            f"with a link or another kind of file ({exc}); nothing was written through it. Stop the "
            "process that renames it (a kernel's thread), or write another path",
            backend=BACKEND,
            sandbox_id=self.sandbox_id,
        )

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

    def read(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read regular files; missing ones (and links, at any component, and directories) are left out.

        Raises:
            InvalidRequest: a bad path.
        """
        checked = [(rel, self._check(rel)) for rel in paths]
        out: dict[str, bytes] = {}
        try:
            base = self.open_base()
        except OSError:
            return out  # below an anchor: the program replaced the working directory; nothing is read through it
        try:
            for rel, norm in checked:
                try:
                    fd = beneath.open_beneath(base, norm, os.O_RDONLY | os.O_NONBLOCK)
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
        finally:
            os.close(base)
        return out

    def wipe(self) -> None:
        """Remove everything inside the workspace, keeping the directory itself (by fd: no link is followed)."""
        base = self.open_base()
        try:
            if self.mode is not None:
                os.fchmod(base, self.mode)
            for name in os.listdir(base):
                beneath.remove_entry(base, name)
        finally:
            os.close(base)

    def remove(self) -> None:
        """Delete the workspace directory. Idempotent."""
        shutil.rmtree(self.path, ignore_errors=True)


def _open_for_write(dirfd: int, name: str) -> int:
    """Open ``name`` in ``dirfd`` as a fresh regular file, removing whatever the program left in its place."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            _remove_unless_regular(dirfd, name)
        except OSError:
            continue  # swapped again while it was removed
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dirfd)
        except OSError as exc:  # ELOOP/ENXIO/EISDIR: replaced between the check and the open
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EEXIST):
                continue
            raise
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
    raise OSError(errno.EBUSY, f"{name!r} keeps being replaced by something other than a regular file")


def _remove_unless_regular(dirfd: int, name: str) -> None:
    """Remove ``name`` if it is anything but a regular file (a planted link, FIFO, socket, directory)."""
    try:
        mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        beneath.remove_entry(dirfd, name)
