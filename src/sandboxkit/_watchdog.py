"""The dead-man switch of the local backends: a watchdog process removes what a dead owner left.

A trainer killed with SIGKILL runs no ``finally`` and no ``atexit``: its sandboxes' processes,
cgroups, mounts and workspaces stay until someone runs ``sandboxkit cleanup``. Every host
process that opens local sandboxes therefore starts one watchdog per backend root (not one
per sandbox) in a session of its own, so it survives the owner. The owner renews a lease
file's mtime from a daemon thread every quarter TTL; once the owner is gone (its pid no longer
names the process that started the watchdog), the watchdog waits until the last renewal plus
the TTL has passed and then runs the backend's own leftover removal, which touches only
entries of dead owners (``backends.subprocess._cleanup``), and exits.

The TTL comes from the pool's deadlines (:func:`ttl_for`), so a crashed run's sandboxes
live no longer than one of its calls could have; ``sandboxkit doctor`` prints it.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import ClassVar

from sandboxkit import _watchdog_process
from sandboxkit._watchdog_process import MIN_TTL_S
from sandboxkit.models import Limits

__all__ = ["LEASE_PREFIX", "Lease", "describe", "lease_dir", "ttl_for", "watchdog_command"]

#: Name prefix of the lease files in :func:`lease_dir` (``.owner-p<pid>-<kind>-<root digest>.lease``):
#: outside the workspace root, which holds workspaces only.
LEASE_PREFIX = ".owner-p"


def ttl_for(deadline_s: float | None, limits: Limits) -> float:
    """How long a dead owner's sandboxes may outlive it: the longest one call of its pool may take.

    That is the pool's deadline when it has one, else the run's wall limit plus its compile
    limit (the default limits' 10 s + 30 s = 40 s), never less than :data:`MIN_TTL_S`.
    """
    longest = deadline_s if deadline_s is not None else limits.timeout_s + limits.compile_timeout_s
    return max(MIN_TTL_S, float(longest))


def lease_dir() -> str:
    """Where this user's lease files live (not in a workspace root, which holds only workspaces)."""
    path = os.path.join(tempfile.gettempdir(), f"sandboxkit-watchdog-{os.geteuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def describe(deadline_s: float | None = None, limits: Limits | None = None) -> str:
    """One line for ``sandboxkit doctor``: what removes a dead owner's sandboxes, and after how long."""
    ttl = ttl_for(deadline_s, limits or Limits())
    source = "the pool's deadline_s" if deadline_s is not None else "timeout_s + compile_timeout_s of the limits"
    return (
        f"a watchdog process per host process removes a SIGKILLed owner's subprocess and Docker sandboxes {ttl:g} s after "
        f"its last renewal (TTL = {source}; a pool with deadline_s uses that); Daytona and E2B sandboxes are "
        f"removed by the service itself one TTL after the owner's last renewal (E2B timeout {ttl:g} s, Daytona "
        f"auto-stop {max(1, math.ceil(ttl / 60))} min)"
    )


def watchdog_command(owner: int, lease_path: str) -> list[str]:
    """The command line of the watchdog process that watches ``owner`` under ``lease_path``.

    kind and root are read from the lease file: a command line naming the root would look like
    one of its sandboxes' processes to whoever scans /proc for them.
    """
    # Run as a file, not ``-m``: ``-m`` would import the whole package first (see ``_watchdog_process``).
    run = f"import runpy; runpy.run_path({_watchdog_process.__file__!r}, run_name='__main__')"
    return [sys.executable, "-c", run, str(owner), lease_path]


class Lease:
    """This process's lease on one backend root, renewed while it lives, watched by a process of its own."""

    _by_root: ClassVar[dict[tuple[str, str], Lease]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, kind: str, root: str, ttl_s: float, cleanup: str) -> None:
        self.kind = kind
        self.root = root
        self.ttl_s = ttl_s
        self.cleanup = cleanup
        self.owner = os.getpid()
        digest = hashlib.sha256(f"{kind}:{root}".encode()).hexdigest()[:12]
        self.path = os.path.join(lease_dir(), f"{LEASE_PREFIX}{self.owner}-{kind}-{digest}.lease")
        self._write()
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_parent, os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen(
            watchdog_command(self.owner, self.path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the trainer's process group must not reach it
            close_fds=True,
            cwd="/",  # never inside a workspace, nor pinning a mount
            env=env,
        )
        threading.Thread(target=self._renew, name="sandboxkit-lease", daemon=True).start()

    @classmethod
    def hold(cls, kind: str, root: str, ttl_s: float, cleanup: str) -> Lease:
        """The lease of ``root`` in this process, started on first use; a longer TTL replaces a shorter one.

        ``cleanup`` names the backend's ``"module:function"`` that removes a dead owner's leftovers under
        ``root``: the watchdog imports it by name, so this module imports no backend (the backends import it).
        """
        key = (kind, root)
        with cls._lock:
            lease = cls._by_root.get(key)  # a forked child (another pid) starts its own
            if lease is None or lease.process.poll() is not None or lease.owner != os.getpid():
                lease = cls._by_root[key] = cls(kind, root, ttl_s, cleanup)
            elif ttl_s > lease.ttl_s:
                lease.ttl_s = ttl_s
                lease._write()
            return lease

    def _write(self) -> None:
        """Record the TTL, kind, root and cleanup function in the lease file; its mtime is the last renewal."""
        with open(self.path, "w") as f:
            f.write(f"{self.ttl_s}\n{self.kind}\n{self.root}\n{self.cleanup}\n")

    def _renew(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                os.utime(self.path)
            time.sleep(self.ttl_s / 4)
