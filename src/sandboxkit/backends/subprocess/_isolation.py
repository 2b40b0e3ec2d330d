"""Which isolation mechanisms this machine allows, and how a sandbox is wrapped in them.

Layers, each probed once per process (so ``capabilities`` and ``sandboxkit doctor`` report
what is really active, never a silently weaker set):

* **uid**: when sandboxkit runs as root, every sandbox runs as its own unused host uid, so
  files that are not world-readable (``/etc/shadow``, ``/root``, other sandboxes) stay closed
  and ``kill(-1)`` from inside reaches only that sandbox's processes.
* **bubblewrap** (``bwrap``, apt ``bubblewrap``): user, PID, mount, IPC, UTS and (by default)
  network namespaces. Only the workspace and a private ``/tmp``, ``/dev/shm`` and
  ``/dev/mqueue`` are writable; other workspaces and other sandboxes' cgroups are hidden;
  every descendant dies with the sandbox's PID namespace; a seccomp filter (``_seccomp``)
  refuses the system calls a program has no business making.
* **cgroup** (see ``_cgroup``): memory and pids limits for the whole sandbox.
* **tmpfs workspace**: a size-capped tmpfs per workspace (root only), so filling the disk
  stops at the quota instead of at the host's free space.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from sandboxkit.backends.subprocess import _libc
from sandboxkit.backends.subprocess._cgroup import CgroupSupport, probe_cgroup

__all__ = [
    "INNER_UID",
    "INNER_WORKDIR",
    "Isolation",
    "allocate_uid",
    "bwrap_argv",
    "mount_tmpfs",
    "probe",
    "release_uid",
    "unmount",
]

log = logging.getLogger(__name__)

#: uid/gid the program sees inside the user namespace (mapped to a private host uid).
INNER_UID = 1000
#: Where a sandbox's workspace appears inside bubblewrap (the Docker backend's default workdir too).
INNER_WORKDIR = "/work"
_UID_BASE = 1_500_000_000
_UID_SPAN = 500_000_000
_used_uids: set[int] = set()


@dataclass(frozen=True)
class Isolation:
    """The mechanisms usable on this machine (result of :func:`probe`)."""

    is_root: bool
    bwrap: str | None  # path of a bwrap that works here, or None
    bwrap_error: str
    disable_userns: bool  # bwrap --disable-userns works (no nested user namespaces)
    cgroup: CgroupSupport
    tmpfs: bool  # we can mount a size-capped tmpfs per workspace
    tmpfs_error: str

    def missing(self) -> tuple[str, ...]:
        """Protections that are not active here, in words, for capabilities and doctor."""
        out = []
        if not self.is_root:
            out.append("separate uid: not running as root, so programs run as the invoking user")
        if self.bwrap is None:
            why = f" ({self.bwrap_error})" if self.bwrap_error else ""
            out += [
                f"user namespace: bubblewrap unavailable{why}; apt-get install bubblewrap",
                "pid namespace: daemons are killed by uid/process group only"
                if self.is_root
                else "pid namespace: double-forked daemons can outlive a run",
                "network namespace: programs can use the network",
                "mount namespace: programs see (but cannot write) the host filesystem",
            ]
        out += [f"cgroup: {m}" for m in self.cgroup.missing]
        if not self.tmpfs:
            out.append(f"disk quota: no tmpfs workspace ({self.tmpfs_error}); only RLIMIT_FSIZE per file")
        return tuple(out)


def allocate_uid() -> int:
    """A host uid no other sandbox of this process uses (random, so other processes rarely collide)."""
    while True:
        uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
        if uid not in _used_uids:
            _used_uids.add(uid)
            return uid


def release_uid(uid: int) -> None:
    _used_uids.discard(uid)


def bwrap_argv(
    iso: Isolation,
    *,
    bwrap: str,
    workspace: str,
    inner: str,
    root: str,
    network: bool,
    tmp_mb: int,
    cwd: str | None = None,
    seccomp_fd: int | None = None,
    cgroup_dirs: Sequence[tuple[str, str]] = (),
    rootfs: str | None = None,
) -> list[str]:
    """The bwrap prefix that puts a command in a fresh set of namespaces around ``workspace``.

    ``inner`` is where the workspace appears inside; ``cwd`` (default: ``inner``) is where the
    command starts, as a path inside the sandbox.
    ``seccomp_fd`` holds a compiled filter (see ``_seccomp``); ``cgroup_dirs`` are
    ``(host dir, path inside)`` pairs: the sandbox's own cgroups, shown read-only where the
    host's whole cgroup tree would be (which would name every sibling sandbox and its usage).
    ``rootfs`` (see ``_rootfs``): a directory bound as ``/`` instead of the host's filesystem;
    the workspace is inside it, and the program is uid 0 there, with no capabilities.
    """
    uid = "0" if rootfs is not None else str(INNER_UID)
    argv = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--uid",
        uid,
        "--gid",
        uid,
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        *(["--bind", rootfs, "/", "--cap-drop", "ALL"] if rootfs is not None else _root_binds(root)),
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--size",
        str(tmp_mb << 20),
        "--tmpfs",
        "/tmp",
        "--size",
        str(tmp_mb << 20),
        "--tmpfs",
        "/dev/shm",
        "--mqueue",
        "/dev/mqueue",  # so the server can see (and reset can clear) the run's POSIX message queues
    ]
    if cgroup_dirs:
        argv += ["--dir", CGROUP_ROOT] if any(dest != CGROUP_ROOT for _, dest in cgroup_dirs) else []
        for host_dir, dest in cgroup_dirs:
            argv += ["--ro-bind", host_dir, dest]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if not network:
        argv.append("--unshare-net")
    if iso.disable_userns:
        argv.append("--disable-userns")
    if rootfs is None:
        argv += ["--bind", workspace, inner]
    argv += ["--chdir", cwd or inner, "--"]
    return argv


#: Where the host's cgroup tree is mounted; never bound whole (see ``bwrap_argv``'s ``cgroup_dirs``).
CGROUP_ROOT = "/sys/fs/cgroup"
#: Top-level paths never bound into a sandbox: replaced (/proc, /dev, /tmp) or private (/root).
_SKIP = frozenset({"/proc", "/dev", "/tmp", "/root", "/lost+found"})
#: Paths where other software mounts and unmounts all the time. bwrap re-mounts every submount
#: of a bind read-only, so a mount vanishing meanwhile would make the sandbox fail to start.
_CHURN = ("/var/lib/docker", "/var/lib/containerd", "/run/docker", "/run/containerd", "/run/netns", "/run/user")


def _root_binds(root: str) -> list[str]:
    """Read-only binds of the host's filesystem, minus /tmp, /root, the workspaces and mount churn.

    Binding ``/`` as a whole would also bind every other sandbox's workspace mount (and
    Docker's), which is both a leak of their existence and a start-up race.
    """
    return _binds_below("/", frozenset({os.path.normpath(root), CGROUP_ROOT, *_CHURN}))


def _binds_below(directory: str, exclude: frozenset[str]) -> list[str]:
    args: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return args
    for name in names:
        path = os.path.join(directory, name)
        if path in exclude or path in _SKIP:
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            if any(e.startswith(path + "/") for e in exclude):
                args += ["--dir", path, *_binds_below(path, exclude)]
            else:
                args += ["--ro-bind-try", path, path]
        elif os.path.isfile(path):
            args += ["--ro-bind-try", path, path]
    return args


def mount_tmpfs(path: str, *, size_mb: int, uid: int, gid: int) -> None:
    """Mount a size-capped tmpfs owned by ``uid`` on ``path``.

    Raises:
        OSError: the kernel refused (not root, or no CAP_SYS_ADMIN in this container).
    """
    _libc.mount(b"tmpfs", path, f"size={size_mb}m,mode=0700,uid={uid},gid={gid},nr_inodes=65536")


def unmount(path: str) -> None:
    """Lazily unmount ``path`` (best effort)."""
    _libc.unmount(path)


def _probe_bwrap(is_root: bool) -> tuple[str | None, str, bool]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bwrap not installed", False
    uid = allocate_uid() if is_root else None
    base = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--uid",
        str(INNER_UID),
        "--ro-bind",
        "/",
        "/",
    ]
    base += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    try:
        for extra, what in (([], "namespaces"), (["--disable-userns"], "disable-userns")):
            proc = subprocess.run(
                [*base, *extra, "--", "true"],
                capture_output=True,
                timeout=10,
                user=uid,
                group=uid,
                extra_groups=[] if uid is not None else None,
                env={"PATH": "/usr/bin:/bin"},
            )
            if proc.returncode != 0:
                err = proc.stderr.decode(errors="replace").strip()[:200]
                if what == "namespaces":
                    return None, f"bwrap cannot create namespaces here: {err}", False
                return bwrap, "", False
        return bwrap, "", True
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bwrap failed to start: {exc}", False
    finally:
        if uid is not None:
            release_uid(uid)


def _probe_tmpfs(is_root: bool) -> tuple[bool, str]:
    if not is_root:
        return False, "needs root"
    path = tempfile.mkdtemp(prefix="sandboxkit-probe-")
    try:
        mount_tmpfs(path, size_mb=1, uid=0, gid=0)
    except OSError as exc:
        return False, str(exc.strerror or exc)
    else:
        unmount(path)
        return True, ""
    finally:
        os.rmdir(path)


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """Find out once which mechanisms work on this machine."""
    is_root = os.geteuid() == 0
    bwrap, bwrap_error, disable_userns = _probe_bwrap(is_root)
    tmpfs, tmpfs_error = _probe_tmpfs(is_root)
    iso = Isolation(
        is_root=is_root,
        bwrap=bwrap,
        bwrap_error=bwrap_error,
        disable_userns=disable_userns,
        cgroup=probe_cgroup(),
        tmpfs=tmpfs,
        tmpfs_error=tmpfs_error,
    )
    log.debug("subprocess isolation on this machine: %s", iso)
    return iso
