"""Per-sandbox memory and pids limits through cgroups (v2, or v1 where that is what is mounted).

Why cgroups next to rlimits: ``RLIMIT_AS`` kills runtimes that reserve far more address
space than they use (JVM, Go, V8), and ``RLIMIT_NPROC`` counts per uid. A memory cgroup
limits what a sandbox really holds (files in its tmpfs included) and reports OOM kills; a
pids cgroup caps a fork bomb. Sandbox cgroups are created under the cgroup this process is
in, so a container's own limits still apply above them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass

__all__ = ["CgroupSupport", "SandboxCgroup", "probe_cgroup"]

log = logging.getLogger(__name__)
PREFIX = "sandboxkit-"


@dataclass(frozen=True)
class CgroupSupport:
    """Where sandbox cgroups can be created, per controller (``None``: not usable here)."""

    version: int | None = None
    memory_parent: str | None = None
    pids_parent: str | None = None
    missing: tuple[str, ...] = ()


def _own_cgroups() -> dict[str, str]:
    """controller -> path of this process's cgroup ("" key for the v2 unified hierarchy)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except OSError:
        pass
    return out


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


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


def probe_cgroup() -> CgroupSupport:
    """Find a writable memory and pids cgroup parent (v2 first, then v1)."""
    own = _own_cgroups()
    v2_root = next(
        (p for p in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified") if os.path.exists(f"{p}/cgroup.controllers")), None
    )
    if v2_root is not None and "" in own:
        parent = os.path.normpath(v2_root + own[""])
        try:
            enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
        except OSError:
            enabled = []
        if "memory" in enabled and "pids" in enabled:
            err = _try_parent(parent, {"memory.max": str(64 << 20), "pids.max": "64"})
            if err is None:
                return CgroupSupport(version=2, memory_parent=parent, pids_parent=parent)
    missing = []
    memory_parent = pids_parent = None
    for controller in ("memory", "pids"):
        base = f"/sys/fs/cgroup/{controller}"
        if controller not in own or not os.path.isdir(base):
            missing.append(f"{controller} limit: no writable cgroup v2 or v1 {controller} controller")
            continue
        parent = os.path.normpath(base + own[controller])
        test = {"memory.limit_in_bytes": str(64 << 20)} if controller == "memory" else {"pids.max": "64"}
        err = _try_parent(parent, test)
        if err is not None:
            missing.append(f"{controller} limit: {err}")
        elif controller == "memory":
            memory_parent = parent
        else:
            pids_parent = parent
    if memory_parent is None:
        missing.append("memory of JVM/Go/Node programs is capped with RLIMIT_DATA only")
    return CgroupSupport(
        version=1 if (memory_parent or pids_parent) else None,
        memory_parent=memory_parent,
        pids_parent=pids_parent,
        missing=tuple(missing),
    )


class SandboxCgroup:
    """The memory/pids cgroup(s) of one sandbox."""

    def __init__(self, support: CgroupSupport, name: str) -> None:
        self.support = support
        self.dirs: list[str] = []
        self.memory_dir = os.path.join(support.memory_parent, PREFIX + name) if support.memory_parent else None
        self.pids_dir = os.path.join(support.pids_parent, PREFIX + name) if support.pids_parent else None
        for d in dict.fromkeys(x for x in (self.memory_dir, self.pids_dir) if x):
            os.mkdir(d)
            self.dirs.append(d)
        self._memory: int | None = None
        self._pids: int | None = None
        self._oom_fd: int | None = None
        if self.memory_dir is not None:
            swap = "memory.swap.max" if support.version == 2 else None
            if swap and os.path.exists(os.path.join(self.memory_dir, swap)):
                _write(os.path.join(self.memory_dir, swap), "0")

    def add(self, pid: int) -> None:
        """Move a process (and the threads of it) into every controller of this sandbox."""
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def set_memory(self, limit: int) -> None:
        """Cap the sandbox's memory (program, its tmpfs files and the fork server)."""
        if self.memory_dir is None or limit == self._memory:
            return
        if self.support.version == 2:
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

    def memory_usage(self) -> int:
        """Bytes charged to the sandbox's memory cgroup now (0 when unknown)."""
        if self.memory_dir is None:
            return 0
        name = "memory.current" if self.support.version == 2 else "memory.usage_in_bytes"
        try:
            return int(_read(os.path.join(self.memory_dir, name)))
        except (OSError, ValueError):
            return 0

    def set_pids(self, limit: int) -> None:
        """Cap the processes and threads of the sandbox."""
        if self.pids_dir is not None and limit != self._pids:
            _write(os.path.join(self.pids_dir, "pids.max"), str(limit))
            self._pids = limit

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this sandbox so far.

        Read twice per command, so the file stays open and is re-read with ``pread``.
        """
        if self.memory_dir is None:
            return 0
        try:
            if self._oom_fd is None:
                name = "memory.events" if self.support.version == 2 else "memory.oom_control"
                self._oom_fd = os.open(os.path.join(self.memory_dir, name), os.O_RDONLY | os.O_CLOEXEC)
            for line in os.pread(self._oom_fd, 4096, 0).decode().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
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
