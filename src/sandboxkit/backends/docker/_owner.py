"""Who owns a container: labels that let ``cleanup`` tell a crashed owner's leftovers from live sandboxes.

A pid alone is not enough: pids are reused, another machine (or another container) can talk
to the same engine, and after a reboot every pid is fresh. So each container and volume carries
the owner's pid, its start time (clock ticks after boot, ``/proc/<pid>/stat`` field 22), the
boot id, the pid namespace and the host name. The owner is alive only if, seen from here, a
process with that pid and that start time exists in the same boot and pid namespace. When this
process cannot see the owner's pid namespace (another machine, another container), the owner's
fate is unknown and the sandbox is kept: ``cleanup --force`` removes it anyway.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping

__all__ = ["OWNER_LABELS", "owner_alive", "owner_labels"]

_PREFIX = "sandboxkit.host_"
PID, START, BOOT, PIDNS, HOST = (f"{_PREFIX}{k}" for k in ("pid", "start", "boot", "pidns", "name"))
OWNER_LABELS = (PID, START, BOOT, PIDNS, HOST)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """Start time of ``pid`` in clock ticks after boot, or "" if there is no such process."""
    stat = _read(f"/proc/{pid}/stat")
    # The command name (field 2) is in parentheses and may hold spaces: split after its last ')'.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@functools.cache
def owner_labels() -> dict[str, str]:
    """Labels naming this process as the owner (computed once: none of them change)."""
    pid = os.getpid()
    return {
        PID: str(pid),
        START: _start_time(pid),
        BOOT: _read("/proc/sys/kernel/random/boot_id"),
        PIDNS: _pidns(),
        HOST: socket.gethostname(),
    }


def owner_alive(labels: Mapping[str, str]) -> bool:
    """Whether the process that created a container with ``labels`` may still be running.

    True when it is, and when that cannot be known from here (never remove what may be in use).
    """
    me = owner_labels()
    pid = labels.get(PID, "")
    if not pid.isdigit():
        return True  # not made by a sandboxkit process we understand: leave it to --force
    boot = labels.get(BOOT)
    if boot is None:  # labelled by an older sandboxkit: only the pid is known
        return os.path.exists(f"/proc/{pid}")
    if boot != me[BOOT]:
        # Another boot of this machine (its processes are all gone), or another machine.
        return labels.get(HOST) != me[HOST]
    if labels.get(PIDNS) != me[PIDNS]:
        return True  # another container on this machine: its pids are not ours to look up
    return _start_time(int(pid)) == labels.get(START, "") != ""
