"""Remove what crashed sandboxkit processes left behind: processes, cgroups, mounts (overlays too), workspaces.

Every workspace and cgroup name carries the owner's pid (``sbx-<id>-p<pid>``); an entry is
a leftover when that process no longer exists. Live processes' sandboxes are never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil

from sandboxkit.backends.subprocess._cgroup import PREFIX as CGROUP_PREFIX
from sandboxkit.backends.subprocess._cgroup import CgroupSupport, SandboxCgroup
from sandboxkit.backends.subprocess._isolation import Isolation, unmount

__all__ = ["remove_leftovers"]

_TAG = re.compile(r"^(sbx-[0-9a-f]+)-p(\d+)")


def _owner_dead(name: str) -> bool:
    match = _TAG.match(name)
    if match is None:
        return False
    pid = int(match.group(2))
    if pid == os.getpid():
        return False
    return not os.path.exists(f"/proc/{pid}")


def _mounts() -> set[str]:
    try:
        with open("/proc/self/mountinfo") as f:
            return {line.split()[4] for line in f}
    except OSError:
        return set()


def _leftover_cgroups(support: CgroupSupport) -> set[str]:
    names: set[str] = set()
    for parent in set(support.parents().values()):
        with contextlib.suppress(OSError):
            for entry in os.listdir(parent):
                if entry.startswith(CGROUP_PREFIX) and _owner_dead(entry[len(CGROUP_PREFIX) :]):
                    names.add(entry[len(CGROUP_PREFIX) :])
    return names


def remove_leftovers(root: str, iso: Isolation, *, keep: set[str]) -> int:
    """Kill, unmount and delete leftovers of dead owners; return how many sandboxes went."""
    removed: set[str] = set()
    for name in _leftover_cgroups(iso.cgroup):
        group = SandboxCgroup(iso.cgroup, name, create=False)
        group.remove()
        removed.add(name)
    mounts = _mounts()
    with contextlib.suppress(OSError):
        for entry in os.listdir(root):
            path = os.path.join(root, entry)
            if path in keep or not _owner_dead(entry):
                continue
            for below in sorted((m for m in mounts if m.startswith(path + "/")), key=len, reverse=True):
                unmount(below)  # a rootfs sandbox's overlay (see ``_rootfs``), before the tmpfs holding it
            if path in mounts:
                unmount(path)
            shutil.rmtree(path, ignore_errors=True)
            match = _TAG.match(entry)
            assert match is not None
            removed.add(f"{match.group(1)}-p{match.group(2)}")
    return len(removed)
