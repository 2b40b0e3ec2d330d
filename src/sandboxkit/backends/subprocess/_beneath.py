"""Open, create and remove paths below a directory fd without following a single symlink.

Why: a process the sandbox keeps between calls (a kernel's thread) can swap a directory of its
workspace with a link to a host directory at any moment, for instance with
``renameat2(RENAME_EXCHANGE)`` in a loop. A host that checks a path (``realpath``, ``lstat``)
and then opens it by name has a window between the two; ``O_NOFOLLOW`` guards only the last
component. So nothing here checks-then-opens: every step is taken relative to a directory fd
the host already holds, and refuses a link at any component.

* :func:`open_beneath` opens a relative path in one ``openat2`` call with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (Linux >= 5.6), or where
  the kernel lacks it, with a chain of ``openat(O_NOFOLLOW | O_DIRECTORY)``, one per component.
  A link anywhere makes it fail (``ELOOP``/``ENOTDIR``); it never reaches outside the directory.
* :func:`make_dirs` walks (and creates) directories by fd, replacing whatever non-directory the
  program left in the way.
* :func:`remove_entry` removes one name of a directory fd (a tree with ``rmtree(dir_fd=)``).

The race is then harmless: a swap makes the host's operation fail or land on the sandbox's own
files, and both are the program's business.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from collections.abc import Callable, Iterable

from sandboxkit.backends.subprocess import _libc

__all__ = ["DIR_FLAGS", "RACED", "make_dirs", "open_beneath", "open_dir", "remove_entry", "split_rel", "walk"]

#: Flags of a directory opened to walk from or list (never a link, never a FIFO's block).
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: ``openat2`` is syscall 437 on every Linux architecture (it came after the tables were unified).
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
#: What an operation raises when the program changed the path under it (a link or another kind of
#: file swapped in; ``rmtree`` refusing a directory that became a link has no errno): the
#: program's doing, which callers report as such rather than as a broken sandbox.
RACED = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO, errno.EBUSY, errno.ENOENT, None})
#: Tries to put a directory in place of what the program keeps putting there.
_TRIES = 8


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """The ``openat2`` syscall through libc's ``syscall``; ``usable`` turns False on the first ENOSYS."""

    def __init__(self) -> None:
        self.usable = True
        self._syscall = None
        try:
            self._syscall = _libc.libc().syscall
        except (OSError, AttributeError):
            self.usable = False

    def __call__(self, dirfd: int, rel: str, flags: int, mode: int) -> int | None:
        """The new fd, or None when the kernel has no ``openat2`` (then the caller walks by hand)."""
        assert self._syscall is not None
        how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
        fd = int(
            self._syscall(
                ctypes.c_long(_SYS_OPENAT2),
                ctypes.c_int(dirfd),
                ctypes.c_char_p(os.fsencode(rel)),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM) and self.usable:  # EPERM: a seccomp filter that denies it
            self.usable = False
            return None
        raise OSError(err, f"{os.strerror(err)}: {rel!r} (below a directory, no links followed)")


_OPENAT2 = _Openat2()


def split_rel(rel: str) -> list[str]:
    """The components of a normalised relative path; refuses ``..``, ``.``, empty and absolute paths.

    Callers pass paths already checked (``check_relative_path``); this is the last guard, so a
    path that would climb out cannot be walked even if a caller forgot.
    """
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise OSError(errno.EINVAL, f"not a plain relative path: {rel!r}")
    return parts


def open_dir(path: str) -> int:
    """Open a directory the host made itself (a workspace, a view's root) as the anchor of a walk."""
    return os.open(path, DIR_FLAGS)


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0o600) -> int:
    """Open ``rel`` below ``dirfd`` with no symlink followed at any component.

    Raises:
        OSError: ELOOP or ENOTDIR when a component is a link (or not a directory), and every
            error ``open`` has (ENOENT, ENXIO for a FIFO with ``O_NONBLOCK | O_WRONLY``...).
    """
    parts = split_rel(rel)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if len(parts) == 1:  # one component: O_NOFOLLOW is the whole guard, and cheaper than a ctypes call
        return os.open(rel, flags, mode, dir_fd=dirfd)
    if _OPENAT2.usable:
        fd = _OPENAT2(dirfd, rel, flags, mode)
        if fd is not None:
            return fd
    parent = walk(dirfd, parts[:-1])
    try:
        return os.open(parts[-1], flags, mode, dir_fd=parent)
    finally:
        os.close(parent)


def _enter(dirfd: int, name: str) -> int:
    return os.open(name, DIR_FLAGS, dir_fd=dirfd)


def walk(dirfd: int, parts: Iterable[str], step: Callable[[int, str], int] = _enter) -> int:
    """A new fd of the directory ``parts`` below ``dirfd``, one component at a time.

    ``step(fd, name)`` opens ``name`` below ``fd`` without following it (by default an ``O_NOFOLLOW |
    O_DIRECTORY`` open; a caller's may make what is missing). Each fd on the way is closed as soon as
    the next is open, and on an error too, so no walk leaks a descriptor whatever the program put there.
    """
    fd = os.dup(dirfd)
    try:
        for name in parts:
            nxt = step(fd, name)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_entry(dirfd: int, name: str) -> None:
    """Remove ``name`` from ``dirfd`` whatever it is (a tree is removed by fd, never through a link).

    ``unlink`` first: it removes a file, link, FIFO, socket or device itself (never what a link
    names) and refuses a directory (``EISDIR``), which only then goes to ``rmtree(dir_fd=)``; that
    checks what it opens is what it looked at. A run's files cost a reset one system call each.
    """
    try:
        os.unlink(name, dir_fd=dirfd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(name, dir_fd=dirfd)


def make_dirs(dirfd: int, parts: list[str], owner: tuple[int, int] | None, mode: int = 0o755) -> int:
    """A new fd of the directory ``parts`` below ``dirfd``, made where missing (given to ``owner``).

    A link, FIFO or file in the way is removed and a directory made instead: the program put it
    there, and the host writing the caller's file is what the caller asked for.

    Raises:
        OSError: EBUSY when the program keeps replacing a component faster than the host makes it.
    """
    return walk(dirfd, parts, lambda fd, name: _enter_or_make(fd, name, owner, mode))


def _enter_or_make(fd: int, name: str, owner: tuple[int, int] | None, mode: int) -> int:
    for _ in range(_TRIES):
        try:
            return os.open(name, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                remove_entry(fd, name)  # a link (ELOOP) or a non-directory (ENOTDIR) in the way
            except OSError:
                continue  # swapped again while it was removed: look at what is there now
        try:
            os.mkdir(name, mode, dir_fd=fd)
        except FileExistsError:
            continue  # replaced again meanwhile: look at what is there now
        try:
            made = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                continue
            raise
        if owner is not None:
            os.fchown(made, *owner)
        return made
    raise OSError(errno.EBUSY, f"{name!r} keeps being replaced by something other than a directory")
