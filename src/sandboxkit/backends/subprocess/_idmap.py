"""An idmapped bind mount: a directory whose files of one owner appear owned by one sandbox's uid.

A fork's overlay needs its lower layer (the checkpoint, written by root) to belong to the
fork's own host uid, or the fork's program cannot change the files it starts with. Chowning every
file through the overlay works (``metacopy=on`` copies only the inode) but costs ~40 µs a file
under load, 40 ms for a 1,000-file workspace. An idmapped mount (Linux >= 5.12; tmpfs >= 6.3)
shows the same files with uid/gid 0 mapped to the fork's uid at no per-file cost: the kernel
maps ids as it reads them. The mapping is taken from a throwaway user namespace whose only job
is to carry ``0 -> uid``; nothing runs in it.

Rootfs sandboxes use the same mount for their image: the unpacked image belongs to
``ROOTFS_UID`` on disk and is shown as each sandbox's own uid (``owner -> uid``), so sandboxes
never share a host uid, nor the kernel's per-user quotas (inotify instances and watches, message
queue bytes, pending signals).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import threading

from sandboxkit.backends.subprocess import _libc

__all__ = ["can_idmap", "idmapped_bind", "reap_helpers"]

_CLONE_NEWUSER = 0x10000000
_READY_TIMEOUT_S = 5.0
_PR_SET_PDEATHSIG = 1
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_MOUNT_ATTR_IDMAP = 0x00100000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
#: x86-64 and aarch64 share these numbers (the new mount API came after the syscall tables merged).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442


#: Killed helpers not reaped yet (see :func:`_reap`).
_UNREAPED: list[int] = []
_UNREAPED_LOCK = threading.Lock()


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _userns_mapping(inside: int, uid: int) -> int:
    """A descriptor of a new user namespace whose uid and gid ``inside`` are ``uid`` outside it.

    The child that holds the namespace is SIGKILLed once its namespace is open, never told to
    exit through a pipe: forks run concurrently in threads, and each child inherits the others'
    pipe ends, so an end-of-file would never come (they deadlocked that way).
    """
    libc = _libc.libc()
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child only unshares, says so, and waits to be killed
        try:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # a parent killed mid-fork takes it along
            if os.getppid() != parent:
                os._exit(0)
            ok = libc.unshare(_CLONE_NEWUSER) == 0
            os.write(ready_w, b"1" if ok else b"0")
            while True:
                signal.pause()
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        ready, _, _ = select.select([ready_r], [], [], _READY_TIMEOUT_S)
        if not ready or os.read(ready_r, 1) != b"1":
            raise OSError("unshare(CLONE_NEWUSER) was refused or did not answer")
        for name, text in (
            ("uid_map", f"{inside} {uid} 1\n"),
            ("setgroups", "deny"),
            ("gid_map", f"{inside} {uid} 1\n"),
        ):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(text)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.kill(pid, signal.SIGKILL)
        _reap(pid)


def _reap(pid: int) -> None:
    """Reap ``pid`` and earlier helpers if they are gone, without waiting for them.

    A killed process takes milliseconds to be torn down (2-10 ms here, under load), which a
    blocking ``waitpid`` added to every sandbox open; the helpers not gone yet are reaped by a
    later call (until then they are zombies, holding nothing but a pid).
    """
    with _UNREAPED_LOCK:
        _UNREAPED.append(pid)
        for child in list(_UNREAPED):
            try:
                gone = os.waitpid(child, os.WNOHANG)[0] != 0
            except ChildProcessError:
                gone = True
            if gone:
                _UNREAPED.remove(child)


def reap_helpers() -> None:
    """Wait for every killed helper not reaped yet (a backend's close: it must leave no zombie behind).

    Each is already SIGKILLed, so this waits only for the kernel to finish tearing it down.
    """
    with _UNREAPED_LOCK:
        for child in _UNREAPED:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, 0)
        _UNREAPED.clear()


def _idmapped_tree(source: str, uid: int, owner: int) -> int:
    """A detached copy of the mount at ``source`` with ``owner``'s files shown as ``uid`` (a descriptor).

    Detached: until ``move_mount`` attaches it, it is nowhere in the tree, and closing the
    descriptor frees it, so even a crash in between leaves nothing mounted.

    Raises:
        OSError: the kernel cannot idmap this filesystem.
    """
    libc = _libc.libc()
    userns = _userns_mapping(owner, uid)
    try:
        tree = libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, source.encode(), _OPEN_TREE_CLONE | os.O_CLOEXEC)
        if tree < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"open_tree({source!r}): {os.strerror(err)}")
        attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns)
        if libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)) < 0:
            err = ctypes.get_errno()
            os.close(tree)
            raise OSError(err, f"mount_setattr(idmap) on {source!r}: {os.strerror(err)}")
        return int(tree)
    finally:
        os.close(userns)


def idmapped_bind(source: str, target: str, uid: int, *, owner: int = 0) -> None:
    """Bind ``source`` on ``target`` with files owned by ``owner`` shown (and created) as ``uid``.

    Raises:
        OSError: the kernel cannot idmap this filesystem (callers fall back to chowning).
    """
    libc = _libc.libc()
    tree = _idmapped_tree(source, uid, owner)
    try:
        if libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"move_mount({target!r}): {os.strerror(err)}")
    finally:
        os.close(tree)


def can_idmap(source: str, *, owner: int, uid: int) -> bool:
    """Whether ``source``'s filesystem takes an idmapped mount (probed on a detached copy: nothing is mounted)."""
    try:
        os.close(_idmapped_tree(source, uid, owner))
    except OSError:
        return False
    return True
