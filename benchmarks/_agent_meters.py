"""What ``sandboxkit bench agent`` measures: CPU-seconds and memory of sandboxes and of the host.

Why a module of its own: how to read a sandbox's CPU and memory depends on the backend and the
cgroup layout, while the benchmark only wants numbers. Every reader returns ``None`` where this
host cannot tell, and the benchmark says so in its row, rather than report a made-up zero.

* **Host CPU**: ``getrusage(RUSAGE_SELF)``, every thread of this process.
* **Sandbox CPU, subprocess**: on cgroup v2 each sandbox cgroup's ``cpu.stat`` ``usage_usec``. On v1
  the sandbox's ``cpu`` hierarchy has no ``cpuacct`` beside it, so :class:`TreeCpu` moves this
  process into a ``cpuacct`` cgroup of its own for the run: everything it starts afterwards (fork
  servers, kernels, commands, helpers) inherits it, and the cgroup's ``cpuacct.usage`` minus the
  host's own CPU is what the sandboxes spent, processes that already exited included.
* **Sandbox CPU, Docker**: the container's own cgroup (v1 ``cpuacct/docker/<id>``, v2
  ``system.slice/docker-<id>.scope``) while it exists.
* **CPU ticks over a window** (suspended sessions): user + system clock ticks of the processes in
  the sandbox's cgroup, from ``/proc/<pid>/stat``; frozen processes do not exit, so none is lost.
* **Memory**: the sandbox's memory cgroup (``memory.usage_in_bytes`` / ``memory.current``).
"""

from __future__ import annotations

import contextlib
import os
import resource
from typing import Any

__all__ = ["TreeCpu", "host_cpu_s", "sandbox_cpu_s", "sandbox_memory_bytes", "sandbox_ticks"]

_CGROUP = "/sys/fs/cgroup"


def host_cpu_s() -> float:
    """User + system CPU-seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _usage_usec(cpu_stat: str | None) -> int | None:
    for line in (cpu_stat or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value)
    return None


def _cgroup_dirs(sandbox: Any) -> list[str]:
    """The subprocess sandbox's cgroup directories ([] for other backends)."""
    cgroup = getattr(sandbox, "cgroup", None)
    return list(getattr(cgroup, "dirs", None) or [])


def _docker_dirs(sandbox: Any) -> list[str]:
    """Where a Docker container's cgroup may be on this host (v1 cgroupfs driver, v2 systemd driver)."""
    cid = getattr(sandbox, "container_id", None)
    if not cid:
        return []
    return [
        f"{_CGROUP}/cpuacct/docker/{cid}",
        f"{_CGROUP}/memory/docker/{cid}",
        f"{_CGROUP}/system.slice/docker-{cid}.scope",
        f"{_CGROUP}/docker/{cid}",
    ]


def sandbox_cpu_s(sandbox: Any) -> float | None:
    """CPU-seconds the sandbox's cgroup has used, or None where no cgroup of it accounts CPU."""
    for d in _cgroup_dirs(sandbox) + _docker_dirs(sandbox):
        usec = _usage_usec(_read(os.path.join(d, "cpu.stat")))
        if usec is not None:
            return usec / 1e6
        nanos = _read(os.path.join(d, "cpuacct.usage"))
        if nanos is not None:
            return int(nanos) / 1e9
    return None


def sandbox_memory_bytes(sandbox: Any) -> int | None:
    """Memory charged to the sandbox's cgroup now (programs, kernels, their tmpfs files), or None."""
    for d in _cgroup_dirs(sandbox) + _docker_dirs(sandbox):
        for name in ("memory.current", "memory.usage_in_bytes"):
            value = _read(os.path.join(d, name))
            if value is not None:
                return int(value)
    return None


def sandbox_ticks(sandbox: Any) -> int | None:
    """User + system clock ticks of the processes now in the subprocess sandbox's cgroup (None: no cgroup)."""
    dirs = _cgroup_dirs(sandbox)
    if not dirs:
        return None
    members: set[str] = set()
    for d in dirs:
        members |= set((_read(os.path.join(d, "cgroup.procs")) or "").split())
    total = 0
    for pid in members:
        stat = _read(f"/proc/{pid}/stat")
        if stat is None:
            continue  # exited between the two reads
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


class TreeCpu:
    """CPU-seconds of this process and of every process it starts while the meter is open (cgroup v1 ``cpuacct``).

    Why move the caller: on v1 the sandboxes' ``cpu`` cgroups do not account CPU (``cpuacct`` is a
    hierarchy of its own here), and a sandbox's short-lived commands are gone before anyone could
    read them. A process's children inherit its cgroup in every hierarchy, so a ``cpuacct`` cgroup
    around the caller catches all of them. :meth:`close` moves the caller back.
    ``available`` is False (and :meth:`total_s` None) where there is no v1 ``cpuacct`` or no right to use it.
    """

    def __init__(self) -> None:
        self._dir: str | None = None
        self._home: str | None = None
        mount = f"{_CGROUP}/cpuacct"
        own = next(
            (
                line.split(":", 2)[2].strip()
                for line in (_read("/proc/self/cgroup") or "").splitlines()
                if "cpuacct" in line.split(":", 2)[1].split(",")
            ),
            None,
        )
        if own is None or not os.path.isfile(os.path.join(mount, own.lstrip("/"), "cpuacct.usage")):
            return
        home = os.path.join(mount, own.lstrip("/"))
        for stale in os.listdir(home):  # earlier runs' cgroups, kept while a watchdog they started lived
            if stale.startswith("sandboxkit-bench-agent-"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(home, stale))
        mine = os.path.join(home, f"sandboxkit-bench-agent-{os.getpid()}")
        try:
            os.makedirs(mine, exist_ok=True)
            with open(os.path.join(mine, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(mine)
            return
        self._dir, self._home = mine, home

    @property
    def available(self) -> bool:
        return self._dir is not None

    def total_s(self) -> float | None:
        """CPU-seconds of this process and everything it started since the meter opened."""
        if self._dir is None:
            return None
        nanos = _read(os.path.join(self._dir, "cpuacct.usage"))
        return None if nanos is None else int(nanos) / 1e9

    def close(self) -> None:
        """Move this process back; the cgroup is removed once the last process started in it is gone."""
        if self._dir is None or self._home is None:
            return
        with contextlib.suppress(OSError), open(os.path.join(self._home, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)  # EBUSY while a watchdog it started still runs: left empty-handed, harmless
        self._dir = None
