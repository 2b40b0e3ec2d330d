"""The host's C library, for the calls Python's ``os`` module lacks (mount, umount2, raw syscalls).

Loaded once here, with ``errno`` kept, so every caller reports a refusal the same way: the rootfs
overlay, the sandbox's tmpfs, the fork's overlay and the idmapped bind mounts all go through it.
``CDLL(None)`` is the libc the interpreter itself is linked with; looking it up by name
(``ctypes.util.find_library``) would run ``ldconfig`` on every mount for the same answer.
"""

from __future__ import annotations

import ctypes
import functools
import os

__all__ = ["libc", "mount", "unmount"]

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, with ``errno`` saved after each call and ``syscall`` returning a ``long``."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib


def mount(fstype: bytes, target: str, options: str) -> None:
    """Mount a ``fstype`` file system (``tmpfs``, ``overlay``) on ``target``, nosuid and nodev.

    Raises:
        OSError: the kernel refused (its errno; not root, no CAP_SYS_ADMIN, a missing target).
    """
    if libc().mount(fstype, target.encode(), fstype, _MS_NOSUID | _MS_NODEV, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype.decode()} on {target!r}: {os.strerror(err)}")


def unmount(path: str) -> None:
    """Lazily detach the mount on ``path`` (best effort: a file a straggler holds open cannot block it)."""
    libc().umount2(path.encode(), _MNT_DETACH)
