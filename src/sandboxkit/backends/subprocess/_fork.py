"""Checkpoint and fork for the subprocess backend: a frozen copy, and overlay children on top of it.

A checkpoint (:class:`DirectorySnapshot`) is one copy of the workspace's files on a private
tmpfs, taken between commands. No command's process survives it, but a session's kernel does
(and a thread a cell started may still be renaming files): the kernel is frozen while the copy
runs (``_freeze``), and the copy walks by fd without following a link (``_copy_tree``), so even
an unfrozen swap cannot make the host copy its own files. Holes stay holes, and the data copied
is capped at ``disk_mb``. A sandbox forked from it does not copy anything: its workspace is an overlay mount
whose lower layer is the checkpoint and whose upper layer lives on the child's own size-capped
tmpfs, so a child costs a mount and a few inodes however large the workspace is, and its writes
never reach the checkpoint, its parent or its siblings.

Two details carry the design:

* **ownership**: every sandbox runs as its own host uid, so the checkpoint's files (root's) would
  belong to the wrong user in a child. The child's lower layer is an idmapped bind of the
  checkpoint (``_idmap``: root shown as the child's uid, no per-file cost). Where the kernel cannot
  idmap, the overlay is mounted with ``metacopy=on`` and every file is chowned through it, which
  copies an inode up, not the data: one inode per file, not a copy of the file;
* **lifetime**: releasing a checkpoint lazily detaches its tmpfs. The kernel keeps the filesystem
  alive while a child's overlay still uses it and frees it with the last one, so releasing a
  checkpoint after forking is safe and nothing stays visible in the mount table.

Where the kernel refuses mounts (not root), a checkpoint is a plain directory and a child gets a
full copy: slower, same semantics. Every directory is named ``sbx-<hex>-p<pid>...`` so
``cleanup`` removes what a crashed process left (see ``_cleanup``).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import shutil
import stat

import anyio
import anyio.to_thread

from sandboxkit.backends.subprocess import _beneath as beneath
from sandboxkit.backends.subprocess import _isolation as isolation
from sandboxkit.backends.subprocess import _libc
from sandboxkit.backends.subprocess._idmap import idmapped_bind
from sandboxkit.base import Snapshot, own_snapshot
from sandboxkit.errors import BackendUnavailable

__all__ = ["DirectorySnapshot", "check_snapshot", "fork_into", "take_snapshot"]

log = logging.getLogger(__name__)
NAME = "subprocess"
#: Whether idmapped checkpoint layers work here (cleared after the first refusal).
_IDMAP = [True]
#: Mode bits a copy keeps: setuid/setgid would mean nothing on a nosuid mount, so they are dropped.
_KEEP_MODE = 0o1777


class DirectorySnapshot(Snapshot):
    """A frozen copy of a workspace: a directory (on its own tmpfs when mounts are allowed).

    Attributes:
        path: the directory holding the files.
        entries: every path in it, relative, parents before children (a child chowns them).
        mounted: a tmpfs is mounted on ``path`` (children are overlays over it).
        size_bytes: bytes of file data copied.
    """

    backend_name = NAME

    def __init__(self, registry: set[DirectorySnapshot], path: str, mounted: bool) -> None:
        self.id = os.path.basename(path)
        self.path = path
        self.mounted = mounted
        self.entries: list[str] = []
        self.size_bytes = 0
        self.released = False
        #: The backend's set of live checkpoints (this one leaves it when released); also whose it is.
        self._registry = registry

    async def release(self) -> None:
        """Detach the copy (children keep it alive until they close) and remove the directory."""
        if self.released:
            return
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.release_sync)

    def release_sync(self) -> None:
        """Synchronous teardown, shared with the backend's emergency cleanup. Never raises."""
        if self.released:
            return
        self.released = True
        self._registry.discard(self)
        try:
            if self.mounted:
                isolation.unmount(self.path)  # lazy: the kernel frees it with the last child's overlay
            shutil.rmtree(self.path, ignore_errors=True)
        except Exception:  # at exit or in a shielded close: best effort, logged
            log.warning("could not remove checkpoint %s", self.path, exc_info=True)

    def __repr__(self) -> str:
        return f"<DirectorySnapshot {self.id} files={len(self.entries)} bytes={self.size_bytes}>"


def _copy_tree(
    src: str, dst: str, entries: list[str] | None, *, budget: int, owner: tuple[int, int] | None = None
) -> int:
    """Copy regular files, directories and symlinks of ``src`` into ``dst``; return the bytes of data copied.

    The source is a workspace the program controlled, and a process it keeps (a kernel's thread)
    may still be swapping its directories for links: every directory is entered by fd with
    ``O_NOFOLLOW | O_DIRECTORY`` from its parent's fd and listed through that fd, links are
    copied as links (read with ``readlinkat``), files are opened ``O_NOFOLLOW | O_NONBLOCK``
    (a FIFO cannot block us), and anything else is left out. A directory swapped for a link
    after it was listed is skipped: its name no longer opens as a directory.

    Files keep their holes (only data extents are copied), and the data copied is capped at
    ``budget`` bytes, so a sparse file of any apparent size costs what it holds.

    Raises:
        OSError: ENOSPC past ``budget``, or what copying raised.
    """
    copied = [0, budget]
    src_fd, dst_fd = beneath.open_dir(src), beneath.open_dir(dst)
    try:
        _copy_dir(src_fd, dst_fd, "", entries, owner, copied)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    return copied[0]


def _copy_dir(
    src_fd: int, dst_fd: int, rel_dir: str, entries: list[str] | None, owner: tuple[int, int] | None, copied: list[int]
) -> None:
    """Copy one directory's entries; subdirectories depth first (parents listed before children)."""
    stack: list[tuple[int, int, str, list[str]]] = [(src_fd, dst_fd, rel_dir, sorted(os.listdir(src_fd)))]
    try:
        while stack:
            s_fd, d_fd, rel_dir, names = stack[-1]
            if not names:
                stack.pop()
                if s_fd != src_fd:
                    os.close(s_fd)
                    os.close(d_fd)
                continue
            name = names.pop(0)
            rel = os.path.join(rel_dir, name)
            try:
                st = os.stat(name, dir_fd=s_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, beneath.DIR_FLAGS, dir_fd=s_fd)
                except OSError:  # swapped for a link (ELOOP/ENOTDIR) or removed since the stat
                    continue
                try:
                    listing = sorted(os.listdir(child))
                    os.mkdir(name, st.st_mode & _KEEP_MODE, dir_fd=d_fd)
                    out = os.open(name, beneath.DIR_FLAGS, dir_fd=d_fd)
                except BaseException:
                    os.close(child)
                    raise
                if owner is not None:
                    os.fchown(out, *owner)
                _add(entries, rel)
                stack.append((child, out, rel, listing))
            elif stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(name, dir_fd=s_fd)
                except OSError:
                    continue
                os.symlink(target, name, dir_fd=d_fd)
                if owner is not None:
                    os.chown(name, *owner, dir_fd=d_fd, follow_symlinks=False)
                _add(entries, rel)
            elif stat.S_ISREG(st.st_mode) and _copy_file(s_fd, d_fd, name, st.st_mode & _KEEP_MODE, owner, copied):
                _add(entries, rel)
            # FIFOs, sockets, devices: not files a checkpoint carries
    finally:
        for s_fd, d_fd, _, _ in stack:
            if s_fd != src_fd:
                os.close(s_fd)
                os.close(d_fd)


def _add(entries: list[str] | None, rel: str) -> None:
    if entries is not None:
        entries.append(rel)


def _copy_file(
    src_dir: int, dst_dir: int, name: str, mode: int, owner: tuple[int, int] | None, copied: list[int]
) -> bool:
    """Copy one regular file's data extents (holes stay holes); False when it is no regular file now."""
    try:
        fd_in = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    except OSError:  # replaced by a link, or removed, since it was listed
        return False
    try:
        size = os.fstat(fd_in)
        if not stat.S_ISREG(size.st_mode):
            return False
        fd_out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            for start, end in _extents(fd_in, size.st_size):
                os.lseek(fd_out, start, os.SEEK_SET)
                offset = start
                while offset < end:
                    if copied[0] >= copied[1]:
                        raise OSError(errno.ENOSPC, f"the checkpoint holds more than {copied[1]} bytes of data")
                    chunk = min(end - offset, copied[1] - copied[0], 1 << 30)
                    n = os.sendfile(fd_out, fd_in, offset, chunk)  # in the kernel; tmpfs has no reflink
                    if n == 0:  # the file shrank meanwhile
                        break
                    offset += n
                    copied[0] += n
            os.ftruncate(fd_out, size.st_size)  # a trailing hole, without data
            if owner is not None:
                os.fchown(fd_out, *owner)
            os.fchmod(fd_out, mode)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
    return True


def _extents(fd: int, size: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each data extent of ``fd`` (``SEEK_DATA``/``SEEK_HOLE``); all of it where unsupported."""
    out = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data past pos: the rest is a hole
                break
            return [(0, size)]  # EINVAL: this filesystem cannot tell
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if end <= start:
            break
        out.append((start, end))
        pos = end
    return out


def _new_dir(root: str, suffix: str) -> str:
    # Named like a sandbox (``sbx-<hex>-p<pid>``) so ``cleanup`` recognises a dead owner's leftovers.
    path = os.path.join(root, f"sbx-{secrets.token_hex(6)}-p{os.getpid()}-{suffix}")
    os.mkdir(path, 0o700)
    return path


def _snapshot_now(workspace: str, snap: DirectorySnapshot, disk_mb: int) -> None:
    if snap.mounted:
        isolation.mount_tmpfs(snap.path, size_mb=disk_mb, uid=0, gid=0)
    snap.size_bytes = _copy_tree(workspace, snap.path, snap.entries, budget=disk_mb << 20)


async def take_snapshot(
    registry: set[DirectorySnapshot], workspace: str, *, root: str, disk_mb: int, mounted: bool, sandbox_id: str
) -> DirectorySnapshot:
    """Copy the ``workspace`` directory into a new checkpoint under ``root`` (call between commands).

    Args:
        registry: the backend's live checkpoints; the new one joins it before anything can leak.
        workspace: host path of the sandbox's workspace (its kernel frozen by the caller).
        root: where the backend makes its sandboxes' directories.
        disk_mb: the size of the checkpoint's tmpfs, and the most data it copies.
        mounted: give the checkpoint a tmpfs of its own (mounts allowed here).
        sandbox_id: the sandbox copied, for messages.

    Raises:
        BackendUnavailable: the copy failed (the checkpoint's tmpfs is full: raise ``disk_mb``).
    """
    try:
        path = _new_dir(root, "ckpt")
    except OSError as exc:
        raise BackendUnavailable(f"cannot create a checkpoint under {root!r}: {exc}", backend=NAME) from exc
    snap = DirectorySnapshot(registry, path, mounted=mounted)
    registry.add(snap)  # registered first: a crash or Ctrl-C from here on cannot leak it
    try:
        # Not cancellable mid-copy (anyio waits for the thread), so a cancelled checkpoint is released whole.
        await anyio.to_thread.run_sync(_snapshot_now, workspace, snap, disk_mb)
    except BaseException as exc:
        await snap.release()
        if isinstance(exc, OSError):
            raise BackendUnavailable(
                f"cannot checkpoint sandbox {sandbox_id}: {exc}; a workspace larger than disk_mb="
                f"{disk_mb} does not fit its checkpoint: raise disk_mb",
                backend=NAME,
                sandbox_id=sandbox_id,
            ) from exc
        raise
    return snap


def _mount_overlay(lower: str, upper: str, work: str, target: str) -> None:
    _libc.mount(b"overlay", target, f"lowerdir={lower},upperdir={upper},workdir={work},metacopy=on,redirect_dir=on")


def fork_into(
    snap: DirectorySnapshot, base: str, *, owner: tuple[int, int] | None, mounted: bool, disk_mb: int
) -> str | None:
    """Give a fresh, empty sandbox the checkpoint's files: an overlay when possible, else a copy.

    Args:
        snap: the checkpoint.
        base: the sandbox's own directory (its tmpfs when ``mounted``), empty.
        owner: the sandbox's host (uid, gid), whose the files become; None when not root.
        mounted: ``base`` is a tmpfs of its own (an overlay can be mounted inside it).
        disk_mb: the most data a copy may hold.

    Returns:
        The host path of the new workspace (the overlay's merged directory inside ``base``), or
        None when the files were copied into ``base`` itself.

    Raises:
        OSError: the overlay or the copy failed (ENOSPC past ``disk_mb``).
    """
    if snap.mounted and mounted:
        lower, upper, work, merged = (os.path.join(base, n) for n in ("lower", "upper", "work", "ws"))
        for d in (lower, upper, work, merged):
            os.mkdir(d, 0o700)
        idmapped = False
        if owner is not None and _IDMAP[0]:
            try:
                idmapped_bind(snap.path, lower, owner[0])  # root's files shown as the fork's uid
                idmapped = True
            except OSError as exc:
                _IDMAP[0] = False  # this kernel cannot: chown from now on (same result, slower)
                log.info("idmapped checkpoint layers unavailable (%s); forks chown their files instead", exc)
        _mount_overlay(lower if idmapped else snap.path, upper, work, merged)
        if owner is not None:
            os.chown(merged, *owner)
            if not idmapped:
                # metacopy=on: a chown copies the inode up, not the data (see the module docstring).
                for rel in snap.entries:
                    os.lchown(os.path.join(merged, rel), *owner)
        return merged
    _copy_tree(snap.path, base, None, budget=disk_mb << 20, owner=owner)
    return None


def check_snapshot(registry: set[DirectorySnapshot], snapshot: Snapshot) -> DirectorySnapshot:
    """``snapshot`` as a checkpoint sandboxes can be opened from: taken by the backend whose ``registry`` this is.

    Raises:
        InvalidRequest: ``snapshot`` is not this backend's, or was released.
    """
    return own_snapshot(snapshot, DirectorySnapshot, lambda mine: mine._registry is registry, NAME)
