"""The watchdog process of the dead-man switch (:mod:`sandboxkit._watchdog`): standard library only.

It is started as a file (``runpy.run_path``), not as ``python -m sandboxkit._watchdog``: a module
of the package is imported after the package, and ``sandboxkit``'s ``__init__`` brings in the pool,
pydantic and anyio (about 270 modules, 130-160 ms of CPU on the shared 2-core machine) for a
process that only waits for a pid. Every host process pays one start per backend root, on its
first sandbox, while that sandbox and the next ones are being set up. The backend's cleanup code
is imported by name only once the owner is dead and its lease has expired.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time

#: The shortest TTL: below it renewals (every quarter TTL) would cost more than they save.
MIN_TTL_S = 1.0


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of ``/proc/PID/stat``); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _expiry(lease_path: str) -> float:
    """The wall time after which the owner's sandboxes may go: last renewal plus TTL (now, once the file is gone)."""
    try:
        with open(lease_path) as f:
            ttl = float(f.readline().strip() or MIN_TTL_S)
        return os.stat(lease_path).st_mtime + ttl
    except (OSError, ValueError):
        return time.time()


def _remove(cleanup: str, root: str) -> None:
    """Remove every dead owner's leftovers with the backend's own cleanup code (``root``: its workspaces)."""
    module, _, function = cleanup.partition(":")
    if not module.startswith("sandboxkit.backends.") or not function:
        return  # only a sandboxkit backend's own function is ever called (the lease file is ours, but cheap to check)
    getattr(importlib.import_module(module), function)(root)


def watch(owner: int, lease_path: str) -> None:
    """Wait for ``owner`` to die, then for its lease to expire, then remove what it left."""
    with open(lease_path) as f:
        _, _kind, root, cleanup = (f.readline().strip() for _ in range(4))
    started = _start_time(owner)
    while started is not None and _start_time(owner) == started:
        time.sleep(min(1.0, max(0.05, (_expiry(lease_path) - time.time()) / 4)))
    while (left := _expiry(lease_path) - time.time()) > 0:
        time.sleep(min(left, 1.0))
    _remove(cleanup, root)
    with contextlib.suppress(OSError):
        os.unlink(lease_path)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
