"""Unpack an image tarball into a fresh directory without ever following a link on the host.

A tarball is untrusted input (any ``docker export`` a caller points at), and unpacking runs as
root. The stdlib's extraction opens each member's path by name, so an archive that first plants
``evil -> /etc/shadow`` and then a regular file, hard link or directory named ``evil`` makes it
write, chmod or chown the host's file through that link. Checking names (``realpath`` of the
member's directory, or even the stdlib's ``data_filter``) cannot close this: a check on a path is
only as good as that path at the moment it is opened.

So every member is placed relative to directory descriptors: its parent is reached from the
destination one component at a time with ``O_DIRECTORY | O_NOFOLLOW`` (a link, a file or
``..`` on the way drops the member), and the entry itself is made new: whatever stood at that
name (an earlier member, a link included) is unlinked first, and a file is created with
``O_CREAT | O_EXCL | O_NOFOLLOW``. Ownership, modes and times are set on the descriptor (or,
for a symlink, on the link itself), never through a name. The result is stricter than
``data_filter``: a member is never written through any link, even one that stays inside.

What is kept: regular files, directories, symlinks (as written; the sandbox resolves them
inside its own root) and hard links to members already unpacked (linked without following a
link they name). Device nodes and FIFOs are dropped (the sandbox's ``/dev`` is its own), set-id
bits are cleared, everything belongs to ``uid``, and directories stay searchable by their
owner. A hard link member only links: like GNU tar, it does not change the shared inode's
mode or times.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator

from sandboxkit.backends.subprocess import _beneath as beneath

__all__ = ["unpack_tarball"]

log = logging.getLogger(__name__)

_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: errno values that mean "a component on the way is not a real directory": the member is dropped.
_NOT_A_DIRECTORY = (errno.ENOTDIR, errno.ELOOP)


class _Refused(Exception):
    """A member that cannot be placed without following a link or leaving the destination (it is skipped)."""


def _parts(name: str) -> tuple[str, ...]:
    """A member name as components below the destination; refused when it is empty or climbs with ``..``."""
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or ".." in parts:
        raise _Refused(f"name {name!r} is empty or climbs with '..'")
    return parts


class _Tree:
    """The destination as a directory descriptor, and a walk to any member's parent that follows no link."""

    def __init__(self, dest: str, uid: int) -> None:
        self.uid = uid
        self.root = os.open(dest, beneath.DIR_FLAGS)
        self._cached: tuple[tuple[str, ...], int] | None = None  # members come grouped by directory

    def close(self) -> None:
        self._forget()
        os.close(self.root)

    def _forget(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None

    @contextlib.contextmanager
    def directory(self, parts: tuple[str, ...], *, create: bool) -> Iterator[int]:
        """A descriptor of the directory ``parts`` (borrowed: valid inside the ``with``).

        Missing components are made (mode 0755, owned by the image uid) when ``create``.

        Raises:
            _Refused: a component is a link or not a directory (or missing, without ``create``).
        """
        if not parts:
            yield self.root
            return
        if self._cached is not None and self._cached[0] == parts:
            yield self._cached[1]
            return
        fd = beneath.walk(self.root, parts, functools.partial(self._step, create=create))
        self._forget()
        self._cached = (parts, fd)
        yield fd

    def _step(self, fd: int, part: str, *, create: bool) -> int:
        """Open ``part`` below ``fd`` without following it."""
        try:
            return os.open(part, beneath.DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise _Refused(f"{part!r} does not exist") from None
            os.mkdir(part, 0o755, dir_fd=fd)
            child = os.open(part, beneath.DIR_FLAGS, dir_fd=fd)
            os.fchown(child, self.uid, self.uid)
            return child
        except OSError as exc:
            if exc.errno in _NOT_A_DIRECTORY:
                raise _Refused(f"{part!r} is a link or not a directory") from None
            raise

    def clear(self, parent: int, leaf: str) -> None:
        """Remove whatever non-directory stands at ``leaf`` (an earlier member, a link included).

        Raises:
            _Refused: a directory stands there (tar would not replace it either).
        """
        try:
            st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise _Refused("a directory of that name exists")
        os.unlink(leaf, dir_fd=parent)


def _times(member: tarfile.TarInfo) -> tuple[int, int]:
    ns = int(member.mtime * 1_000_000_000)
    return ns, ns


def _file(tree: _Tree, tar: tarfile.TarFile, member: tarfile.TarInfo, parent: int, leaf: str) -> None:
    tree.clear(parent, leaf)
    source = tar.extractfile(member)
    fd = os.open(leaf, _NEW_FILE_FLAGS, 0o600, dir_fd=parent)
    with os.fdopen(fd, "wb") as out:
        if source is not None:
            shutil.copyfileobj(source, out, 1 << 20)
        out.flush()
        os.fchown(fd, tree.uid, tree.uid)
        os.fchmod(fd, member.mode & 0o777)  # no set-id bits
        with contextlib.suppress(OSError, OverflowError, ValueError):
            os.utime(fd, ns=_times(member))


def _directory(tree: _Tree, member: tarfile.TarInfo, parent: int, leaf: str) -> None:
    try:
        st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(leaf, dir_fd=parent)
        st = None
    if st is None:
        os.mkdir(leaf, 0o700, dir_fd=parent)
    fd = os.open(leaf, beneath.DIR_FLAGS, dir_fd=parent)
    try:
        os.fchown(fd, tree.uid, tree.uid)
        os.fchmod(fd, (member.mode & 0o777) | 0o700)  # the owner (root inside the sandbox) can always enter
    finally:
        os.close(fd)


def _symlink(tree: _Tree, member: tarfile.TarInfo, parent: int, leaf: str) -> None:
    tree.clear(parent, leaf)
    os.symlink(member.linkname, leaf, dir_fd=parent)
    os.chown(leaf, tree.uid, tree.uid, dir_fd=parent, follow_symlinks=False)
    with contextlib.suppress(OSError, OverflowError, ValueError):
        os.utime(leaf, ns=_times(member), dir_fd=parent, follow_symlinks=False)


def _hardlink(tree: _Tree, member: tarfile.TarInfo, parent_parts: tuple[str, ...], leaf: str) -> None:
    target = _parts(member.linkname)
    # Two descriptors at once: the target's directory is opened apart from the (cached) member's.
    with tree.directory(target[:-1], create=False) as borrowed:
        source_dir = os.dup(borrowed)
    try:
        try:
            st = os.stat(target[-1], dir_fd=source_dir, follow_symlinks=False)
        except FileNotFoundError:
            raise _Refused(f"hard link target {member.linkname!r} was not unpacked") from None
        if stat.S_ISDIR(st.st_mode):
            raise _Refused(f"hard link target {member.linkname!r} is a directory")
        with tree.directory(parent_parts, create=True) as parent:
            if (target[:-1], target[-1]) == (parent_parts, leaf):
                return  # a link to itself: the entry is already there
            tree.clear(parent, leaf)
            # follow_symlinks=False: a target that is a symlink is linked as the link, never its host file.
            os.link(target[-1], leaf, src_dir_fd=source_dir, dst_dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(source_dir)


def _place(tree: _Tree, tar: tarfile.TarFile, member: tarfile.TarInfo) -> tuple[str, ...] | None:
    """Unpack one member; the directory's components when it is one (its time is set at the end)."""
    parts = _parts(member.name)
    if member.islnk():
        _hardlink(tree, member, parts[:-1], parts[-1])
        return None
    with tree.directory(parts[:-1], create=True) as parent:
        if member.isreg():
            _file(tree, tar, member, parent, parts[-1])
        elif member.isdir():
            _directory(tree, member, parent, parts[-1])
            return parts
        elif member.issym():
            _symlink(tree, member, parent, parts[-1])
        else:
            raise _Refused("not a file, directory or link (devices and FIFOs are the sandbox's own)")
    return None


def unpack_tarball(tarball: str, dest: str, uid: int) -> None:
    """Unpack ``tarball`` (any compression ``tarfile`` reads) into the empty directory ``dest``, owned by ``uid``.

    Members that cannot be placed safely are skipped and logged (see the module docstring).

    Raises:
        tarfile.TarError: the archive is corrupt or truncated.
        OSError: the destination's filesystem failed (full, read-only, ...).
    """
    tree = _Tree(dest, uid)
    directories: list[tuple[tuple[str, ...], tarfile.TarInfo]] = []
    try:
        with tarfile.open(tarball) as tar:
            for member in tar:
                try:
                    made = _place(tree, tar, member)
                except _Refused as why:
                    log.info("rootfs %s: member %r skipped: %s", tarball, member.name, why)
                    continue
                if made is not None:
                    directories.append((made, member))
        # Directory times last, deepest first: every entry made inside one changed its mtime.
        for parts, member in reversed(directories):
            with (
                contextlib.suppress(_Refused, OSError, OverflowError, ValueError),
                tree.directory(parts, create=False) as fd,
            ):
                os.utime(fd, ns=_times(member))
        os.fchown(tree.root, uid, uid)
    finally:
        tree.close()
