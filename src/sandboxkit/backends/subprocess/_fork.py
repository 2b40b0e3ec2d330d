"""Checkpoint and fork for the subprocess backend: a frozen copy, and overlay children on top of it.

A checkpoint (:class:`DirectorySnapshot`) is one copy of the workspace's files on a private
tmpfs, taken between commands (no process of the sandbox survives a command, so the files are
quiescent). A sandbox forked from it does not copy anything: its workspace is an overlay mount
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

import ctypes
import errno
import logging
import os
import secrets
import shutil
import stat
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from sandboxkit.backends.subprocess import _isolation as isolation
from sandboxkit.backends.subprocess._idmap import idmapped_bind
from sandboxkit.backends.subprocess._workspace import Workspace
from sandboxkit.base import Snapshot
from sandboxkit.errors import BackendUnavailable, InvalidRequest
from sandboxkit.models import Limits

if TYPE_CHECKING:
    from sandboxkit.backends.subprocess._backend import SubprocessBackend
    from sandboxkit.backends.subprocess._sandbox import SubprocessSandbox

__all__ = ["DirectorySnapshot", "open_forked", "take_snapshot"]

log = logging.getLogger(__name__)
NAME = "subprocess"
_MS_NOSUID, _MS_NODEV = 2, 4
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

    def __init__(self, backend: SubprocessBackend, path: str, mounted: bool) -> None:
        self.id = os.path.basename(path)
        self.path = path
        self.mounted = mounted
        self.entries: list[str] = []
        self.size_bytes = 0
        self.released = False
        self._backend = backend

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
        self._backend._snapshots.discard(self)
        try:
            if self.mounted:
                isolation.unmount(self.path)  # lazy: the kernel frees it with the last child's overlay
            shutil.rmtree(self.path, ignore_errors=True)
        except Exception:  # at exit or in a shielded close: best effort, logged
            log.warning("could not remove checkpoint %s", self.path, exc_info=True)

    def __repr__(self) -> str:
        return f"<DirectorySnapshot {self.id} files={len(self.entries)} bytes={self.size_bytes}>"


def _copy_tree(src: str, dst: str, entries: list[str] | None) -> int:
    """Copy regular files, directories and symlinks of ``src`` into ``dst``; return the bytes copied.

    The source is a workspace the program controlled: links are copied as links (never followed),
    files are opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot block us), and anything that
    is not a file, a directory or a link is left out.
    """
    copied = 0
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(src, rel_dir)) as it:
            items = sorted(it, key=lambda e: e.name)
        for item in items:
            rel = os.path.join(rel_dir, item.name)
            target = os.path.join(dst, rel)
            try:
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(target, st.st_mode & _KEEP_MODE)
                stack.append(rel)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(item.path), target)
            elif stat.S_ISREG(st.st_mode):
                copied += _copy_file(item.path, target, st.st_mode & _KEEP_MODE)
            else:
                continue  # FIFOs, sockets, devices: not files a checkpoint carries
            if entries is not None:
                entries.append(rel)
    return copied


def _copy_file(src: str, dst: str, mode: int) -> int:
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            done = 0
            while n := os.sendfile(fd_out, fd_in, None, 1 << 30):  # in the kernel; tmpfs has no reflink
                done += n
            os.fchmod(fd_out, mode)
            return done
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _new_dir(backend: SubprocessBackend, suffix: str) -> str:
    # Named like a sandbox (``sbx-<hex>-p<pid>``) so ``cleanup`` recognises a dead owner's leftovers.
    path = os.path.join(backend.root, f"sbx-{secrets.token_hex(6)}-p{os.getpid()}-{suffix}")
    os.mkdir(path, 0o700)
    return path


def _snapshot_now(sandbox: SubprocessSandbox, snap: DirectorySnapshot) -> None:
    if snap.mounted:
        isolation.mount_tmpfs(snap.path, size_mb=sandbox._backend.disk_mb, uid=0, gid=0)
    snap.size_bytes = _copy_tree(sandbox.workspace.path, snap.path, snap.entries)


async def take_snapshot(sandbox: SubprocessSandbox) -> DirectorySnapshot:
    """Copy ``sandbox``'s workspace into a new checkpoint (call between commands).

    Raises:
        BackendUnavailable: the copy failed (the checkpoint's tmpfs is full: raise ``disk_mb``).
    """
    backend = sandbox._backend
    try:
        path = _new_dir(backend, "ckpt")
    except OSError as exc:
        raise BackendUnavailable(f"cannot create a checkpoint under {backend.root!r}: {exc}", backend=NAME) from exc
    snap = DirectorySnapshot(backend, path, mounted=backend.isolation.tmpfs)
    backend._snapshots.add(snap)  # registered first: a crash or Ctrl-C from here on cannot leak it
    try:
        # Not cancellable mid-copy (anyio waits for the thread), so a cancelled checkpoint is released whole.
        await anyio.to_thread.run_sync(_snapshot_now, sandbox, snap)
    except BaseException as exc:
        await snap.release()
        if isinstance(exc, OSError):
            raise BackendUnavailable(
                f"cannot checkpoint sandbox {sandbox.id}: {exc}; a workspace larger than disk_mb="
                f"{backend.disk_mb} does not fit its checkpoint: raise disk_mb",
                backend=NAME,
                sandbox_id=sandbox.id,
            ) from exc
        raise
    return snap


def _mount_overlay(lower: str, upper: str, work: str, target: str) -> None:
    opts = f"lowerdir={lower},upperdir={upper},workdir={work},metacopy=on,redirect_dir=on".encode()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"overlay", target.encode(), b"overlay", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {target!r}: {os.strerror(err)}")


def _fork_into(sandbox: SubprocessSandbox, snap: DirectorySnapshot) -> None:
    """Give ``sandbox`` (fresh, empty) the checkpoint's files: an overlay when possible, else a copy."""
    base = sandbox._base
    owner = sandbox.workspace.owner
    if snap.mounted and sandbox._mounted:
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
        sandbox.workspace = Workspace(merged, owner, sandbox.id)
        if owner is not None:
            os.chown(merged, *owner)
            if not idmapped:
                # metacopy=on: a chown copies the inode up, not the data (see the module docstring).
                for rel in snap.entries:
                    os.lchown(os.path.join(merged, rel), *owner)
        return
    _copy_tree(snap.path, base, None)
    if owner is not None:
        for root, dirs, files in os.walk(base):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), *owner)


async def open_forked(backend: SubprocessBackend, snapshot: Snapshot, limits: Limits) -> SubprocessSandbox:
    """Open a sandbox whose workspace starts as ``snapshot`` (copy-on-write over it when mounted).

    Raises:
        InvalidRequest: ``snapshot`` is not this backend's, or was released.
        BackendUnavailable: the workspace could not be made.
    """
    if not isinstance(snapshot, DirectorySnapshot) or snapshot._backend is not backend:
        raise InvalidRequest(
            f"cannot open a subprocess sandbox from {snapshot!r}: it was taken by another backend object",
            backend=NAME,
        )
    if snapshot.released:
        raise InvalidRequest(
            f"checkpoint {snapshot.id} was released; fork before releasing it, or take a new one", backend=NAME
        )
    sandbox = await backend.open(limits)
    try:
        await anyio.to_thread.run_sync(_fork_into, sandbox, snapshot)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await sandbox.close()
        if isinstance(exc, OSError):
            hint = "raise disk_mb" if exc.errno == errno.ENOSPC else "run `sandboxkit doctor`"
            raise BackendUnavailable(
                f"cannot fork checkpoint {snapshot.id} into sandbox {sandbox.id}: {exc}; {hint}",
                backend=NAME,
                sandbox_id=sandbox.id,
            ) from exc
        raise
    return sandbox
