"""Per-sandbox memory, pids and CPU limits through cgroups (v2, v1 or a hybrid of both).

Why cgroups next to rlimits: ``RLIMIT_AS`` kills runtimes that reserve far more address
space than they use (JVM, Go, V8), and ``RLIMIT_NPROC`` counts per uid. A memory cgroup
limits what a sandbox really holds (files in its tmpfs included) and reports OOM kills; a
pids cgroup caps a fork bomb; a CPU quota keeps a sandbox full of busy processes from
starving its neighbours (``Limits.cpus``). Sandbox cgroups are created below the cgroup this
process is in, so a container's own limits still apply above them; ``_cgroup_tree`` finds or
builds that parent. Only where that cgroup is given too few controllers and an ancestor offers
them (root in the init cgroup namespace) do they go into sandboxkit's own cgroup there instead.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import secrets
import signal
import time
from dataclasses import dataclass

from sandboxkit.backends.subprocess._cgroup_tree import WANTED, cgroup_mounts, host_path, own_cgroups, prepare_v2

__all__ = ["CPU_PERIOD_US", "CgroupSupport", "SandboxCgroup", "cpu_quota_us", "probe_cgroup"]

log = logging.getLogger(__name__)
PREFIX = "sandboxkit-"
#: The CPU quota's period (100 ms, the kernel's and Docker's default).
CPU_PERIOD_US = 100_000
#: The smallest quota the kernel accepts (1 ms per period).
_MIN_QUOTA_US = 1000


@dataclass(frozen=True)
class CgroupSupport:
    """Where sandbox cgroups can be created, per controller (``None``: not usable here).

    ``version`` is 2 when any controller is on the unified hierarchy, 1 when all usable ones
    are on v1 hierarchies; ``how`` says in words where the parents are and how they were found.
    """

    version: int | None = None
    memory_parent: str | None = None
    pids_parent: str | None = None
    missing: tuple[str, ...] = ()
    cpu_parent: str | None = None
    how: str = ""

    def parents(self) -> dict[str, str]:
        """controller -> parent directory, for the controllers usable here."""
        found = {"memory": self.memory_parent, "pids": self.pids_parent, "cpu": self.cpu_parent}
        return {c: p for c, p in found.items() if p is not None}


def cpu_quota_us(cpus: float) -> int:
    """The quota per :data:`CPU_PERIOD_US` that gives ``cpus`` cores (rounded up; at least 1 ms)."""
    return max(_MIN_QUOTA_US, math.ceil(cpus * CPU_PERIOD_US))


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _unified(directory: str) -> bool:
    """Whether a cgroup directory is on the v2 hierarchy (every v2 cgroup has cgroup.controllers)."""
    return os.path.exists(os.path.join(directory, "cgroup.controllers"))


def _try_parent(parent: str, files: dict[str, str]) -> str | None:
    """Create and remove a test child of ``parent``, writing ``files``; None if that works."""
    probe = os.path.join(parent, f"{PREFIX}probe-{secrets.token_hex(4)}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        return f"cannot create a cgroup under {parent} ({exc.strerror})"
    try:
        for name, value in files.items():
            _write(os.path.join(probe, name), value)
    except OSError as exc:
        return f"cannot set {name} under {parent} ({exc.strerror})"
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    return None


#: A test write per controller, as (v2 file, v1 file, value).
_PROBES = {
    "memory": ("memory.max", "memory.limit_in_bytes", str(64 << 20)),
    "pids": ("pids.max", "pids.max", "64"),
    "cpu": ("cpu.max", "cpu.cfs_quota_us", None),
}


#: Written once into each new v2 memory cgroup, where the kernel has the file.
#: ``memory.swap.max`` 0: the limit is RAM; swap would let a bomb outlive its limit, slowly.
#: ``memory.oom.group`` 1: the first OOM kill takes every process of the sandbox at once (the fork
#: server and a session's kernel too). Killed one at a time, the rest of a program that forked many
#: allocators could sit at the limit, runnable, with no further OOM, until its timeout (seen on a
#: 16-core host: 3-8 kills of 20, then nothing; docs/cgroups.md). The program's outcome is the same,
#: ``memory_exceeded``; a sandbox whose server it took is discarded, as when a program kills its parent.
#: ``memory.high`` stays ``max``: it throttles rather than kills, which turns a bomb into a slow timeout.
_V2_MEMORY = {"memory.swap.max": "0", "memory.oom.group": "1"}


def _probe_files(controller: str, v2: bool) -> dict[str, str]:
    v2_file, v1_file, value = _PROBES[controller]
    if controller == "cpu":
        quota = cpu_quota_us(0.5)
        if v2:
            return {v2_file: f"{quota} {CPU_PERIOD_US}"}
        return {"cpu.cfs_period_us": str(CPU_PERIOD_US), v1_file: str(quota)}
    assert value is not None
    return {v2_file if v2 else v1_file: value}


def probe_cgroup() -> CgroupSupport:
    """Find (on v2: build) a parent for sandbox cgroups per controller: v2 first, then v1 for the rest."""
    own = own_cgroups()
    mounts = cgroup_mounts()
    parents: dict[str, str] = {}
    v2_problems: dict[str, str] = {}
    how: list[str] = []
    if mounts.unified is not None and "" in own:
        tree = prepare_v2(mounts.unified, own[""])
        if tree.parent is not None:
            for c in tree.controllers:
                err = _try_parent(tree.parent, _probe_files(c, v2=True))
                if err is None:
                    parents[c] = tree.parent
                else:
                    v2_problems[c] = err
            if parents:
                how.append(tree.how)
        for problem in tree.problems:  # "<controller> limit: ...", or about the whole hierarchy
            about = problem.partition(" limit:")[0]
            for c in WANTED if about not in WANTED else (about,):
                v2_problems.setdefault(c, problem)
    missing: list[str] = []
    v1_used: list[str] = []
    for c in (c for c in WANTED if c not in parents):
        mount = mounts.v1.get(c)
        parent = host_path(mount, own[c]) if mount is not None and c in own else None
        if parent is None or not os.path.isdir(parent):
            why = v2_problems.get(c, f"{c} limit: no writable cgroup v2 or v1 {c} controller")
            missing.append(why if why.startswith(f"{c} limit:") else f"{c} limit: {why}")
            continue
        err = _try_parent(parent, _probe_files(c, v2=False))
        if err is not None:
            missing.append(f"{c} limit: {err}")
        else:
            parents[c] = parent
            v1_used.append(f"{c} under {parent}")
    if v1_used:
        hybrid = f" (hybrid host: the v2 hierarchy at {mounts.unified[0]} does not hold them)" if mounts.unified else ""
        how.append("cgroup v1: " + ", ".join(v1_used) + hybrid)
    if "memory" not in parents:
        missing.append("memory of JVM/Go/Node programs is capped with RLIMIT_DATA only")
    if "cpu" not in parents:
        missing.append("cpus limit: not enforced (a sandbox's busy processes compete with every other program)")
    on_v2 = any(_unified(p) for p in parents.values())
    return CgroupSupport(
        version=(2 if on_v2 else 1) if parents else None,
        memory_parent=parents.get("memory"),
        pids_parent=parents.get("pids"),
        cpu_parent=parents.get("cpu"),
        missing=tuple(missing),
        how="; ".join(how) if how else "no usable cgroup controller: rlimits only",
    )


class SandboxCgroup:
    """The memory, pids and cpu cgroup(s) of one sandbox (one directory on v2, one per hierarchy on v1)."""

    def __init__(self, support: CgroupSupport, name: str, *, create: bool = True) -> None:
        """Create the sandbox's cgroups (``create=False``: adopt existing ones, to remove a crash's leftovers)."""
        self.support = support
        parents = support.parents()
        self.memory_dir, self.pids_dir, self.cpu_dir = (
            os.path.join(parents[c], PREFIX + name) if c in parents else None for c in ("memory", "pids", "cpu")
        )
        self.dirs: list[str] = []
        for d in dict.fromkeys(x for x in (self.memory_dir, self.pids_dir, self.cpu_dir) if x):
            if create:
                os.mkdir(d)
            elif not os.path.isdir(d):
                continue
            self.dirs.append(d)
        self._memory: int | None = None
        self._pids: int | None = None
        self._cpus: float | None = None
        self._cpus_set = False
        self._oom_fd: int | None = None
        if create and self.memory_dir is not None:
            for name, value in _V2_MEMORY.items():
                path = os.path.join(self.memory_dir, name)
                if os.path.exists(path):  # v2 only; swap.max is absent without swap accounting
                    _write(path, value)

    def add(self, pid: int) -> None:
        """Move a process (and the threads of it) into every controller of this sandbox."""
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def set_memory(self, limit: int) -> None:
        """Cap the sandbox's memory (program, its tmpfs files and the fork server)."""
        if self.memory_dir is None or limit == self._memory:
            return
        if _unified(self.memory_dir):
            if self._memory is not None and limit < self._memory:
                self._fits_under(limit)
            _write(os.path.join(self.memory_dir, "memory.max"), str(limit))
        else:
            memsw = os.path.join(self.memory_dir, "memory.memsw.limit_in_bytes")
            mem = os.path.join(self.memory_dir, "memory.limit_in_bytes")
            # v1 insists memsw >= mem at every step; order the writes so that always holds.
            order = [mem, memsw] if self._memory is not None and limit < self._memory else [memsw, mem]
            for path in order:
                if os.path.exists(path):
                    try:
                        _write(path, str(limit))
                    except OSError:
                        if path == mem:
                            raise
        self._memory = limit

    def _fits_under(self, limit: int) -> None:
        """Refuse (EBUSY, as v1 does) a v2 limit below what the sandbox holds after reclaim.

        v2 takes a lowered ``memory.max`` by OOM-killing until the cgroup fits, which, with
        ``memory.oom.group``, is every process of the sandbox, its session's kernel included: the
        caller's too-small request would end the session. Between commands nothing but the idle
        server runs, so what reclaim cannot free (files in the sandbox's tmpfs) stays put.
        """
        assert self.memory_dir is not None
        excess = self.memory_usage() - limit
        if excess <= 0:
            return
        with contextlib.suppress(OSError):  # memory.reclaim: Linux 5.19+; EAGAIN when it frees less
            _write(os.path.join(self.memory_dir, "memory.reclaim"), str(excess))
        if self.memory_usage() > limit:
            raise OSError(errno.EBUSY, "the sandbox holds more memory than the new limit")

    def memory_usage(self) -> int:
        """Bytes charged to the sandbox's memory cgroup now (0 when unknown)."""
        if self.memory_dir is None:
            return 0
        name = "memory.current" if _unified(self.memory_dir) else "memory.usage_in_bytes"
        try:
            return int(_read(os.path.join(self.memory_dir, name)))
        except (OSError, ValueError):
            return 0

    def set_pids(self, limit: int) -> None:
        """Cap the processes and threads of the sandbox."""
        if self.pids_dir is not None and limit != self._pids:
            _write(os.path.join(self.pids_dir, "pids.max"), str(limit))
            self._pids = limit

    def set_cpus(self, cpus: float | None) -> None:
        """Give the sandbox ``cpus`` cores' worth of CPU time per period (None: no quota of its own).

        On v1 a quota above the parent's is refused (EINVAL): the sandbox then has none of its
        own, and the parent's, which is smaller, holds it.
        """
        if self.cpu_dir is None or (self._cpus_set and cpus == self._cpus):
            return
        if _unified(self.cpu_dir):
            quota = "max" if cpus is None else str(cpu_quota_us(cpus))
            _write(os.path.join(self.cpu_dir, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
        else:
            _write(os.path.join(self.cpu_dir, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            try:
                _write(os.path.join(self.cpu_dir, "cpu.cfs_quota_us"), str(-1 if cpus is None else cpu_quota_us(cpus)))
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                _write(os.path.join(self.cpu_dir, "cpu.cfs_quota_us"), "-1")
        self._cpus, self._cpus_set = cpus, True

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this sandbox so far.

        Read once or twice per command, so the file stays open and is re-read with ``pread``.
        """
        if self.memory_dir is None:
            return 0
        try:
            if self._oom_fd is None:
                name = "memory.events" if _unified(self.memory_dir) else "memory.oom_control"
                self._oom_fd = os.open(os.path.join(self.memory_dir, name), os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(self._oom_fd, 4096, 0)
        except OSError:
            return 0
        # One line ``oom_kill N`` (v1's ``oom_kill_disable`` and v2's ``oom_group_kill`` never match
        # ``oom_kill `` with its space); found without splitting the file into lines.
        start = data.find(b"oom_kill ")
        if start < 0:
            return 0
        end = data.find(b"\n", start)
        try:
            return int(data[start + 9 : end if end >= 0 else len(data)])
        except ValueError:
            return 0

    def pids(self) -> list[int]:
        """Every process in the sandbox's cgroups."""
        out: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
        return sorted(out)

    def kill_all(self, wait_s: float = 2.0) -> None:
        """SIGKILL every process in the sandbox's cgroups and wait (bounded) until they are gone."""
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left and delete the cgroup directories (best effort)."""
        if self._oom_fd is not None:
            os.close(self._oom_fd)
            self._oom_fd = None
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            else:
                log.warning("could not remove cgroup %s", d)
