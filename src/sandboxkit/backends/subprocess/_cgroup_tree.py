"""Where sandbox cgroups may live on this host: cgroup v2 (delegated or not), v1, or hybrid.

Why a module of its own: finding a parent that can hold controllers is the host-specific half
of the cgroup story (the per-sandbox half is in ``_cgroup``). On cgroup v2 a process's own
cgroup almost never can: the *no internal processes* rule forbids enabling ``memory``,
``pids`` or ``cpu`` for the children of a cgroup that holds processes itself, and this process
lives in its cgroup. So, as container runtimes do, sandboxkit builds a small subtree in the
cgroup it was given::

    <own cgroup>/                  controllers enabled for its children (only this file is written)
        sandboxkit.host/           the processes that were in <own cgroup>, this one included
        sandboxkit.sandboxes/      memory, pids and cpu enabled: the parent of every sandbox
            sandboxkit-sbx-.../    one sandbox (made by ``SandboxCgroup``)

Only the process's own cgroup and what sandboxkit creates below it are written; ancestors and
sibling cgroups are left alone. A cgroup systemd manages and has not delegated is not written
either (systemd would undo it): sandboxkit asks systemd for a transient scope with
``Delegate=yes`` holding this process (what ``systemd-run --scope -p Delegate=yes`` does at
launch) and builds the subtree there; where systemd cannot be asked, ``doctor`` says how to get a
delegation. A later sandboxkit process started from the leaf finds the subtree and reuses it.

Where the own cgroup is given fewer controllers than the hierarchy's root offers (its parent
enables only some for it) and this process may write above it (root in the init cgroup
namespace), the sandboxes go into sandboxkit's own cgroup ``<ancestor>/sandboxkit`` instead, as
Docker and systemd make their own slices; see :func:`_ancestor_tree` for what it writes.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

__all__ = [
    "HOST_LEAF",
    "SANDBOXES",
    "TOP",
    "WANTED",
    "CgroupMounts",
    "V2Tree",
    "cgroup_mounts",
    "own_cgroups",
    "prepare_v2",
]

#: The controllers sandboxes use, in the order they are reported.
WANTED = ("memory", "pids", "cpu")
#: The leaf the host's own processes move into, so that their cgroup may enable controllers.
HOST_LEAF = "sandboxkit.host"
#: The parent of every sandbox cgroup in a subtree sandboxkit built.
SANDBOXES = "sandboxkit.sandboxes"
#: sandboxkit's own cgroup next to an ancestor's children, where this process's cgroup lacks controllers.
TOP = "sandboxkit"


@dataclass(frozen=True)
class CgroupMounts:
    """The cgroup hierarchies mounted here: the unified one, and v1 controller -> (mount point, root)."""

    unified: tuple[str, str] | None = None
    v1: dict[str, tuple[str, str]] = field(default_factory=dict)


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> CgroupMounts:
    """Read the cgroup mounts from ``mountinfo`` (the mount's root matters inside containers)."""
    unified = None
    v1: dict[str, tuple[str, str]] = {}
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return CgroupMounts()
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts, extra = fields.split(), tail.split()
        if len(parts) < 5 or len(extra) < 3:
            continue
        root, point = parts[3], parts[4]
        if extra[0] == "cgroup2" and unified is None:
            unified = (point, root)
        elif extra[0] == "cgroup":
            for option in extra[2].split(","):
                v1.setdefault(option, (point, root))
    return CgroupMounts(unified=unified, v1=v1)


def own_cgroups(path: str = "/proc/self/cgroup") -> dict[str, str]:
    """controller -> this process's cgroup path ("" key for the v2 unified hierarchy)."""
    out: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                _, controllers, cgroup = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = cgroup
    except (OSError, ValueError):
        pass
    return out


def host_path(mount: tuple[str, str], cgroup: str) -> str | None:
    """The directory of ``cgroup`` under a mount whose root is ``mount[1]`` (None: not below it)."""
    point, root = mount
    rel = os.path.relpath(cgroup, root) if root != "/" else cgroup.lstrip("/")
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return os.path.normpath(os.path.join(point, rel))


def _words(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass(frozen=True)
class V2Tree:
    """The outcome of :func:`prepare_v2`: the sandboxes' parent and the controllers it can give them."""

    parent: str | None
    controllers: tuple[str, ...]
    how: str
    problems: tuple[str, ...] = ()


def _systemd_undelegated(cgroup: str, root_cgroup: bool) -> bool:
    """Whether systemd manages ``cgroup`` and has not delegated it (writing there fights systemd)."""
    if root_cgroup or not os.path.basename(cgroup).endswith((".service", ".scope", ".slice")):
        return False
    try:
        with open("/proc/1/comm") as f:
            if f.read().strip() != "systemd":
                return False
    except OSError:
        return False
    for attr in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(cgroup, attr).strip(b"\0") == b"1":
                return False
    return True


def _delegated_scope(unified: tuple[str, str]) -> tuple[str | None, str]:
    """Ask systemd to move this process into a new transient scope with Delegate=yes.

    Returns:
        The scope's cgroup path (None when systemd could not be asked) and why not, in words.
    """
    busctl = shutil.which("busctl")
    if busctl is None:
        return None, "no busctl to ask systemd with"
    pid = os.getpid()
    unit = f"sandboxkit-{pid}.scope"
    call = ["call", "--quiet", "org.freedesktop.systemd1", "/org/freedesktop/systemd1"]
    call += ["org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))", unit, "fail"]
    call += ["3", "PIDs", "au", "1", str(pid), "Delegate", "b", "true"]
    call += ["Description", "s", f"sandboxkit sandboxes of process {pid}", "0"]
    try:
        done = subprocess.run([busctl, *call], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"busctl: {exc}"
    if done.returncode != 0:
        return None, f"StartTransientUnit on the system bus: {done.stderr.strip() or done.returncode}"
    deadline = time.monotonic() + 10.0  # the start job moves the process a moment later
    while time.monotonic() < deadline:
        now = own_cgroups().get("")
        if now is not None and os.path.basename(now) == unit:
            return now, ""
        time.sleep(0.02)
    return None, f"systemd started {unit} but this process is not in it"


def _move_processes(cgroup: str, leaf: str) -> str | None:
    """Move every process of ``cgroup`` into ``leaf``; an error in words, or None."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf)
    for pid in _words(os.path.join(cgroup, "cgroup.procs")):
        try:
            _write(os.path.join(leaf, "cgroup.procs"), pid)
        except ProcessLookupError:
            continue  # it exited meanwhile
        except OSError as exc:
            return f"cannot move process {pid} from {cgroup} into {leaf} ({exc.strerror})"
    return None


def _enable(cgroup: str, controller: str, leaf: str | None) -> str | None:
    """Enable ``controller`` for the children of ``cgroup``; an error in words, or None.

    ``leaf``: where the processes of ``cgroup`` go when the kernel refuses because of them
    (EBUSY: no internal processes); None where they must stay.
    """
    control = os.path.join(cgroup, "cgroup.subtree_control")
    for _ in range(10):  # processes forked meanwhile land in the cgroup again: move them too
        if controller in _words(control):
            return None
        try:
            _write(control, f"+{controller}")
            return None
        except OSError as exc:
            if exc.errno != errno.EBUSY or leaf is None:
                return f"cannot enable {controller} for the children of {cgroup} ({exc.strerror})"
        moved = _move_processes(cgroup, leaf)
        if moved is not None:
            return moved
    return f"cannot enable {controller} for the children of {cgroup}: processes keep arriving in it"


def _ancestor_offering(point: str, cgroup: str, target: set[str]) -> str | None:
    """The nearest ancestor of ``cgroup`` (up to the mount point) whose children may get every controller of ``target``.

    An ancestor other than the hierarchy's real root counts only where it already enables them
    all in its ``cgroup.subtree_control`` (sandboxkit never changes that file in a cgroup it did
    not create); the real root counts where they are in its ``cgroup.controllers``.
    """
    directory = cgroup
    while directory != point and directory.startswith(point + os.sep):
        directory = os.path.dirname(directory)
        real_root = not os.path.exists(os.path.join(directory, "cgroup.type"))
        offered = set(_words(os.path.join(directory, "cgroup.controllers" if real_root else "cgroup.subtree_control")))
        if target <= offered:
            return directory
    return None


def _ancestor_tree(unified: tuple[str, str], cgroup: str, wanted: tuple[str, ...], here: set[str]) -> V2Tree | None:
    """Make sandboxkit's own cgroup :data:`TOP` next to ``cgroup``'s ancestors where they offer more controllers.

    Why: a parent may give this process's cgroup fewer controllers than the host has (the real
    host's ``/process_api`` enables only ``memory`` for ``/process_api/<id>``), and no write
    inside the own cgroup can get the others. As Docker and systemd make their own top-level
    slices, sandboxkit then makes ``<ancestor>/sandboxkit`` and puts the sandboxes there. That
    needs root in the cgroup namespace that shows the ancestor (with ``nsdelegate``, moving a
    process there takes write access to the common ancestor's ``cgroup.procs``). The only file
    written in a cgroup sandboxkit did not create is the real root's ``cgroup.subtree_control``,
    and only to enable a wanted controller the root has but does not yet give its children.
    The sandboxes then sit outside this process's cgroup: the limits of its parents (the
    ``memory.max`` of ``/process_api``) no longer count them; their own limits do.

    Returns:
        The tree (None where no ancestor gives more than ``here``, or it could not be made).
    """
    point = os.path.normpath(unified[0])
    mount_root = not os.path.exists(os.path.join(point, "cgroup.type"))
    target = set(wanted) & set(
        _words(os.path.join(point, "cgroup.controllers" if mount_root else "cgroup.subtree_control"))
    )
    if target <= here:
        return None
    ancestor = _ancestor_offering(point, cgroup, target)
    if ancestor is None:
        return None
    real_root = not os.path.exists(os.path.join(ancestor, "cgroup.type"))
    top = os.path.join(ancestor, TOP)
    made = False
    try:
        os.mkdir(top)
        made = True
    except FileExistsError:
        pass
    except OSError as exc:
        log.info("cannot make %s (%s): sandboxes stay under this process's cgroup", top, exc.strerror)
        return None
    enabled: list[str] = []
    problems: list[str] = []
    for c in (c for c in wanted if c in target):
        err = _enable(ancestor, c, None) if real_root else None  # the root may hold processes: no rule there
        if err is None:
            err = _enable(top, c, None)
        if err is None:
            enabled.append(c)
        else:
            problems.append(f"{c} limit: {err}")
    problems += [f"{c} limit: the hierarchy's root does not offer {c}" for c in wanted if c not in target]
    if not set(enabled) > here:
        if made:  # leave no empty cgroup behind for nothing
            with contextlib.suppress(OSError):
                os.rmdir(top)
        return None
    given = " ".join(sorted(here)) or "none"
    how = (
        f"cgroup v2 cgroup {top} made by sandboxkit at "
        + ("the hierarchy's root" if real_root else f"the ancestor {ancestor}")
        + f", since this process's cgroup {cgroup} is given only: {given} (sandboxes are outside it: its"
        " parents' limits do not count them)"
    )
    return V2Tree(top, tuple(enabled), how, tuple(problems))


def prepare_v2(unified: tuple[str, str], own: str, wanted: tuple[str, ...] = WANTED) -> V2Tree:
    """Build (or find) the sandboxkit subtree under this process's v2 cgroup ``own``.

    Args:
        unified: the cgroup2 mount point and the root of the hierarchy it shows.
        own: this process's cgroup path (``/proc/self/cgroup``'s ``0::`` line).
        wanted: the controllers to give the sandboxes (tests pass others).

    Returns:
        The sandboxes' parent (None when nothing could be set up), the controllers enabled there,
        in words how the tree was found, and why any wanted controller is missing.
    """
    cgroup = host_path(unified, own)
    if cgroup is None or not os.path.isdir(cgroup):
        return V2Tree(None, (), "", (f"this process's cgroup {own} is not visible under {unified[0]}",))
    if os.path.basename(cgroup) == HOST_LEAF and os.path.isdir(os.path.join(os.path.dirname(cgroup), SANDBOXES)):
        cgroup = os.path.dirname(cgroup)  # started from the leaf of a subtree an earlier process built
    root_cgroup = not os.path.exists(os.path.join(cgroup, "cgroup.type"))  # the hierarchy's real root has none
    scope = ""
    if _systemd_undelegated(cgroup, root_cgroup):
        moved_to, why = _delegated_scope(unified)
        if moved_to is None:
            return V2Tree(
                None,
                (),
                "",
                (
                    f"systemd manages {cgroup} and has not delegated it, and a delegated scope could not be had "
                    f"({why}); run sandboxkit in a unit with Delegate=yes (systemd-run --scope -p Delegate=yes ...)",
                ),
            )
        scope = f"; this process moved out of the undelegated {own} into the systemd scope {moved_to} (Delegate=yes)"
        own, cgroup = moved_to, host_path(unified, moved_to) or ""
    where = (
        "the hierarchy's root"
        if root_cgroup
        else "this container's cgroup namespace root"
        if own == "/"
        else f"this process's cgroup {own}"
    )
    available = set(_words(os.path.join(cgroup, "cgroup.controllers")))
    problems = [
        f"{c} limit: {c} is not delegated to {cgroup} (not in its cgroup.controllers); the cgroup's owner must "
        "enable it in the parent's cgroup.subtree_control"
        for c in wanted
        if c not in available
    ]
    if problems and not root_cgroup:
        above = _ancestor_tree(unified, cgroup, wanted, available)
        if above is not None:
            return V2Tree(above.parent, above.controllers, above.how + scope, above.problems)
    leaf = None if root_cgroup else os.path.join(cgroup, HOST_LEAF)
    sandboxes = os.path.join(cgroup, SANDBOXES)
    offered = [c for c in wanted if c in available]
    todo = [c for c in offered if c not in _words(os.path.join(cgroup, "cgroup.subtree_control"))]
    if leaf is not None and todo and _words(os.path.join(cgroup, "cgroup.procs")):
        # Move first, even where the kernel would allow otherwise: a cgroup with processes and a
        # threaded controller (pids, cpu) enabled becomes a thread root, and its children can then
        # never hold a domain controller (memory), nor any controller at all (EOPNOTSUPP).
        err = _move_processes(cgroup, leaf)
        if err is not None:
            return V2Tree(None, (), "", (*problems, *(f"{c} limit: {err}" for c in offered)))
    enabled: list[str] = []
    for c in offered:
        err = _enable(cgroup, c, leaf)
        if err is None:
            with contextlib.suppress(FileExistsError):
                os.mkdir(sandboxes)
            err = _enable(sandboxes, c, None)
        if err is None:
            enabled.append(c)
        else:
            problems.append(f"{c} limit: {err}")
    if not enabled:
        return V2Tree(None, (), "", tuple(problems))
    moved = leaf is not None and os.path.isdir(leaf)
    how = f"cgroup v2 subtree {sandboxes} in {where}" + (
        f" (its processes, this one included, moved into {leaf})" if moved else ""
    )
    how += scope
    return V2Tree(sandboxes, tuple(enabled), how, tuple(problems))
