"""Hold still, with the cgroup freezer, the processes a sandbox keeps between calls while the host touches its files.

A command's processes are all gone when it returns, but a session's kernel is not, and a
thread a cell started keeps running between calls: it can rename the workspace's files while
the host reads, writes or checkpoints them. The host's fd walk (``_beneath``) already makes
that harmless; freezing is the second wall, and it also gives a checkpoint a consistent copy.

Where the sandbox's processes can be frozen:

* cgroup v2 (the sandbox's cgroup is on the unified hierarchy): the sandbox's own cgroup
  (``cgroup.freeze``), which the kernel joined before it ran a line. Everything of the sandbox
  stops, the fork server too: the host holds the sandbox's files, and nothing of it should run
  meanwhile;
* cgroup v1 (or hybrid): a ``freezer`` cgroup made for the kernel (``freezer.state``) below this
  process's own freezer cgroup, which the kernel joins with its other cgroups before ``exec``.

Elsewhere (not root, no freezer) nothing is frozen and the fd walk stands alone. A frozen
cgroup is always thawed when the host is done, on an error or a cancellation too; v1 only
delivers SIGKILL to a thawed task, so killing the kernel thaws it first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Iterator

import anyio
import anyio.to_thread

from sandboxkit.backends.subprocess._cgroup import SandboxCgroup
from sandboxkit.backends.subprocess._cgroup_tree import cgroup_mounts, host_path, own_cgroups

__all__ = ["ENABLED", "Freezer", "frozen", "suspend_freezer"]

log = logging.getLogger(__name__)

#: Whether host file operations freeze kept processes at all (tests switch it off to check the fd walk alone).
ENABLED = True
#: How long the host waits for every task to stop before it goes on anyway (the fd walk still holds).
FREEZE_WAIT_S = 1.0


class Freezer:
    """One cgroup whose processes the host can stop and resume.

    Attributes:
        directory: the cgroup's directory.
        version: 1 (``freezer.state``) or 2 (``cgroup.freeze``).
        procs: the ``cgroup.procs`` a process writes its pid to in order to join (v1), or None
            when the processes are in it already (v2: the sandbox's own cgroup).
    """

    def __init__(self, directory: str, version: int, *, owned: bool) -> None:
        self.directory = directory
        self.version = version
        self.procs = os.path.join(directory, "cgroup.procs") if owned else None
        self._owned = owned

    @classmethod
    def create(cls, cgroup: SandboxCgroup | None, name: str) -> Freezer | None:
        """The freezer of a sandbox whose cgroup is ``cgroup``, or None where this host has none."""
        for directory in cgroup.dirs if cgroup is not None else ():
            if os.path.exists(os.path.join(directory, "cgroup.freeze")):  # a v2 cgroup: the kernel is in it
                return cls(directory, 2, owned=False)
        mount = cgroup_mounts().v1.get("freezer")
        own = own_cgroups().get("freezer")
        parent = host_path(mount, own) if mount is not None and own is not None else None
        if parent is None:
            return None
        directory = os.path.join(parent, f"sandboxkit-{name}-{secrets.token_hex(3)}")
        try:
            os.mkdir(directory)
        except OSError as exc:
            log.info("no freezer cgroup for %s (%s): kept processes are not frozen during host file access", name, exc)
            return None
        return cls(directory, 1, owned=True)

    def _file(self) -> str:
        return os.path.join(self.directory, "freezer.state" if self.version == 1 else "cgroup.freeze")

    def _is_frozen(self) -> bool:
        if self.version == 1:
            with open(self._file()) as f:
                return f.read().strip() == "FROZEN"
        with open(os.path.join(self.directory, "cgroup.events")) as f:
            return "frozen 1" in f.read()

    def freeze(self) -> bool:
        """Stop every process of the cgroup; True once all are stopped (False after :data:`FREEZE_WAIT_S`)."""
        try:
            with open(self._file(), "w") as f:
                f.write("FROZEN" if self.version == 1 else "1")
            deadline = time.monotonic() + FREEZE_WAIT_S
            while not self._is_frozen():
                if time.monotonic() > deadline:
                    log.warning(
                        "cgroup %s did not freeze within %.1fs; going on unfrozen", self.directory, FREEZE_WAIT_S
                    )
                    return False
                time.sleep(0.0002)
        except OSError as exc:
            log.warning("cannot freeze cgroup %s: %s", self.directory, exc)
            return False
        return True

    def thaw(self) -> None:
        """Let the cgroup's processes run again. Never raises (a cgroup already removed is thawed)."""
        with contextlib.suppress(OSError), open(self._file(), "w") as f:
            f.write("THAWED" if self.version == 1 else "0")

    def remove(self) -> None:
        """Thaw, and delete the cgroup if it is this freezer's own (once its processes are gone)."""
        self.thaw()
        if not self._owned:
            return
        for _ in range(100):
            try:
                os.rmdir(self.directory)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
        log.warning("could not remove freezer cgroup %s", self.directory)


@contextlib.contextmanager
def frozen(freezer: Freezer | None) -> Iterator[None]:
    """Run the body with ``freezer``'s processes stopped (nothing happens for None or with :data:`ENABLED` off)."""
    if freezer is None or not ENABLED:
        yield
        return
    freezer.freeze()
    try:
        yield
    finally:
        freezer.thaw()


async def suspend_freezer(freezer: Freezer | None) -> bool:
    """Freeze ``freezer`` until thawed, for a suspended session; True once it is frozen (or there is none).

    A freezer that does not stop within :data:`FREEZE_WAIT_S` is thawed again and False returned:
    a half-frozen sandbox would count as suspended while part of it still ran.
    """
    if freezer is None:
        return True
    if await anyio.to_thread.run_sync(freezer.freeze):
        return True
    freezer.thaw()
    return False
