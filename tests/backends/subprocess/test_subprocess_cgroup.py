"""Where sandbox cgroups go (issue 32 item 2), and what the cgroup limits hold, on the real kernel.

The subtree tests build a delegated cgroup on this machine's real cgroup v2 hierarchy (here the
unified one of a hybrid host; in ``scripts/cgroup2-vm.sh`` a v2-only kernel) with a process living
in it, then let :func:`prepare_v2` set it up as it would the host's own cgroup. They use whatever
controller the hierarchy offers (``hugetlb`` on a hybrid host, ``pids`` on a v2 one): the
no-internal-processes rule they work around is the same for every controller.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._cgroup_tree import (
    HOST_LEAF,
    SANDBOXES,
    TOP,
    cgroup_mounts,
    host_path,
    own_cgroups,
    prepare_v2,
)
from sandboxkit.backends.subprocess._isolation import probe
from sandboxkit.backends.subprocess._sandbox import SERVER_PIDS
from sandboxkit.models import Limits, RunRequest, RunResult, Status
from sandboxkit.testing.conformance._limits import _FORK_BOMB as FORKS_UNTIL_REFUSED
from support.marks import missing, requires
from support.subprocess_sandboxes import RecordingBackend

ISO = probe()
MOUNTS = cgroup_mounts()


def _words(path: str) -> list[str]:
    with open(path) as f:
        return f.read().split()


def _lines(path: str) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass
class Delegated:
    """A cgroup handed to "the host" (``own``: its path in the hierarchy), with a process inside."""

    mount: tuple[str, str]
    own: str
    path: str
    controller: str
    resident: subprocess.Popen[bytes]


def _remove_tree(path: str) -> None:
    for dirpath, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
        for _ in range(100):
            try:
                os.rmdir(dirpath)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


@pytest.fixture
def delegated() -> Iterator[Delegated]:
    """A fresh cgroup below the v2 root whose parent offers one controller; a process lives in it.

    On a hybrid host the unified root's ``hugetlb`` may not be enabled for children yet; it is
    enabled for the test and disabled again after it (a controller no process of this machine uses).
    """
    if MOUNTS.unified is None or os.geteuid() != 0:
        missing("needs root and a mounted cgroup v2 hierarchy")
    assert MOUNTS.unified is not None
    root = MOUNTS.unified[0]
    offered = _words(os.path.join(root, "cgroup.controllers"))
    controller = next((c for c in ("pids", "memory", "cpu", "hugetlb") if c in offered), None)
    if controller is None:
        missing(f"the cgroup v2 root {root} offers no controller")
    assert controller is not None
    control = os.path.join(root, "cgroup.subtree_control")
    enabled_here = controller not in _words(control)
    if enabled_here:
        _write(control, f"+{controller}")
    name = f"sandboxkit-test-{secrets.token_hex(4)}"
    path = os.path.join(root, name)
    os.mkdir(path)
    resident = subprocess.Popen(["sleep", "600"])
    try:
        _write(os.path.join(path, "cgroup.procs"), str(resident.pid))
        yield Delegated(MOUNTS.unified, f"/{name}", path, controller, resident)
    finally:
        resident.kill()
        resident.wait()
        _remove_tree(path)
        if enabled_here:
            with contextlib.suppress(OSError):
                _write(control, f"-{controller}")


def _cgroup_of(pid: int) -> str:
    return own_cgroups(f"/proc/{pid}/cgroup")[""]


def test_a_cgroup_holding_processes_gets_a_subtree_with_its_processes_in_a_leaf(delegated: Delegated) -> None:
    """The issue's host: controllers delegated but not enabled, and the host process in the cgroup."""
    other = os.path.join(delegated.path, "not-ours")
    os.mkdir(other)  # a child cgroup someone else made: left as it is
    tree = prepare_v2(delegated.mount, delegated.own, wanted=(delegated.controller,))
    assert tree.parent == os.path.join(delegated.path, SANDBOXES), tree
    assert tree.controllers == (delegated.controller,)
    assert tree.problems == ()
    assert _cgroup_of(delegated.resident.pid) == f"{delegated.own}/{HOST_LEAF}"
    assert delegated.controller in _words(os.path.join(delegated.path, "cgroup.subtree_control"))
    assert delegated.controller in _words(os.path.join(tree.parent, "cgroup.subtree_control"))
    assert _words(os.path.join(other, "cgroup.subtree_control")) == []
    assert "moved into" in tree.how and HOST_LEAF in tree.how
    # The sandboxes' parent takes a sandbox cgroup that holds the controller.
    sandbox = os.path.join(tree.parent, "sandboxkit-sbx-test")
    os.mkdir(sandbox)
    assert delegated.controller in _words(os.path.join(sandbox, "cgroup.controllers"))


def test_a_process_started_in_the_leaf_reuses_the_subtree(delegated: Delegated) -> None:
    first = prepare_v2(delegated.mount, delegated.own, wanted=(delegated.controller,))
    again = prepare_v2(delegated.mount, f"{delegated.own}/{HOST_LEAF}", wanted=(delegated.controller,))
    assert again.parent == first.parent
    assert again.controllers == first.controllers
    assert not os.path.exists(os.path.join(delegated.path, HOST_LEAF, HOST_LEAF))
    assert not os.path.exists(os.path.join(delegated.path, HOST_LEAF, SANDBOXES))


def _undelegated(delegated: Delegated) -> str:
    """A cgroup one level down whose parent enables nothing for it, with the resident moved into it."""
    inner = os.path.join(delegated.path, "undelegated")
    os.mkdir(inner)
    # The parent must not hold processes while it has a child that is offered nothing: move the
    # resident down into the undelegated cgroup (whose parent enables no controller).
    _write(os.path.join(inner, "cgroup.procs"), str(delegated.resident.pid))
    return inner


def test_a_controller_no_ancestor_offers_is_reported_and_nothing_moves(delegated: Delegated) -> None:
    """Not in this cgroup's ``cgroup.controllers`` nor the root's: say so, touch nothing."""
    inner = _undelegated(delegated)
    absent = "sandboxkit_absent"
    tree = prepare_v2(delegated.mount, f"{delegated.own}/undelegated", wanted=(absent,))
    assert tree.parent is None
    assert any("not delegated" in p and absent in p for p in tree.problems), tree
    assert _cgroup_of(delegated.resident.pid) == f"{delegated.own}/undelegated"
    assert [e for e in os.listdir(inner) if e.startswith("sandboxkit")] == []


def test_a_cgroup_its_parent_gives_too_little_gets_sandboxkits_own_cgroup_at_the_root(delegated: Delegated) -> None:
    """The real 16-core host: ``/process_api`` enables only memory for ``/process_api/<id>``, the
    root offers every controller. sandboxkit makes ``<root>/sandboxkit``, enables the controller
    there, and leaves this process, its cgroup and the parent's ``subtree_control`` as they were."""
    inner = _undelegated(delegated)
    root = delegated.mount[0]
    top = os.path.join(root, TOP)
    made_top = not os.path.exists(top)
    parent_control = _words(os.path.join(delegated.path, "cgroup.subtree_control"))
    sandbox = os.path.join(top, f"sandboxkit-sbx-test-{secrets.token_hex(3)}")
    try:
        tree = prepare_v2(delegated.mount, f"{delegated.own}/undelegated", wanted=(delegated.controller,))
        assert tree.parent == top, tree
        assert tree.controllers == (delegated.controller,)
        assert TOP in tree.how and "hierarchy's root" in tree.how
        assert _cgroup_of(delegated.resident.pid) == f"{delegated.own}/undelegated"
        assert _words(os.path.join(delegated.path, "cgroup.subtree_control")) == parent_control
        assert [e for e in os.listdir(inner) if e.startswith("sandboxkit")] == []
        # A sandbox cgroup there holds the controller, and a process of this cgroup can move in.
        os.mkdir(sandbox)
        assert delegated.controller in _words(os.path.join(sandbox, "cgroup.controllers"))
        _write(os.path.join(sandbox, "cgroup.procs"), str(delegated.resident.pid))
        assert _cgroup_of(delegated.resident.pid) == f"/{TOP}/{os.path.basename(sandbox)}"
        # A second process finds it and reuses it.
        again = prepare_v2(delegated.mount, f"{delegated.own}/undelegated", wanted=(delegated.controller,))
        assert (again.parent, again.controllers) == (tree.parent, tree.controllers)
    finally:
        _write(os.path.join(inner, "cgroup.procs"), str(delegated.resident.pid))
        _remove_tree(sandbox)
        if made_top:
            _remove_tree(top)


def test_a_cgroup_outside_the_mount_is_not_guessed() -> None:
    """Inside a container without its own cgroup namespace, v1 mounts show the container's cgroup
    at the mount point (mount root ``/docker/<id>``); paths outside it are not under the mount."""
    mount = ("/sys/fs/cgroup/memory", "/docker/abc")
    assert host_path(mount, "/docker/abc") == "/sys/fs/cgroup/memory"
    assert host_path(mount, "/docker/abc/x") == "/sys/fs/cgroup/memory/x"
    assert host_path(mount, "/docker/other") is None
    assert host_path(("/sys/fs/cgroup", "/"), "/process_api/x") == "/sys/fs/cgroup/process_api/x"


needs_memory_cgroup = requires(ISO.cgroup.memory_parent is not None, "needs a writable memory cgroup")
needs_pids_cgroup = requires(ISO.cgroup.pids_parent is not None, "needs a writable pids cgroup")


def children_allocating(count: int, megabytes: int, *, then: str, hold_s: float = 0.0) -> str:
    """A program whose ``count`` children each touch ``megabytes`` MB, every one under its own
    address-space limit, hold it ``hold_s`` seconds and exit; the parent waits for all, then prints ``then``."""
    return f"""
import os, time
kids = []
for _ in range({count}):
    pid = os.fork()
    if pid == 0:
        block = bytearray({megabytes} << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep({hold_s})
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print({then!r})
"""


#: Twenty processes of 200 MB each (4 GB in all).
FOUR_GB = children_allocating(20, 200, then="all allocated")


@dataclass
class AtTheLimit:
    """A program's run at ``memory_mb=256``, as the sandbox's memory cgroup saw it."""

    result: RunResult
    oom_kills: int
    memory_dir: str


async def _run_at_256_mb(backend: RecordingBackend, code: str, timeout_s: float) -> AtTheLimit:
    sandbox: SubprocessSandbox = await backend.open(Limits(timeout_s=timeout_s, memory_mb=256, pids=64))
    try:
        result = await sandbox.run(RunRequest(code=code, language="python", limits=sandbox.limits))
        assert sandbox.cgroup is not None and sandbox.cgroup.memory_dir is not None
        return AtTheLimit(result, sandbox.cgroup.oom_kills(), sandbox.cgroup.memory_dir)
    finally:
        await sandbox.close()


@needs_memory_cgroup
async def test_four_gigabytes_in_twenty_processes_end_memory_exceeded(backend: RecordingBackend) -> None:
    """Each process stays under RLIMIT_AS; only the sandbox's memory cgroup sees the 4 GB."""
    run = await _run_at_256_mb(backend, FOUR_GB, timeout_s=60.0)
    print(f"4 GB in 20 processes at memory_mb=256: {run.result.status.value}, {run.oom_kills} OOM kill(s)")
    assert run.result.status is Status.MEMORY_EXCEEDED, run.result
    assert run.oom_kills > 0


@needs_pids_cgroup
async def test_forks_past_the_cap_are_refused_by_the_pids_cgroup(backend: RecordingBackend) -> None:
    """The sandbox's pids.max (not only the uid's RLIMIT_NPROC) is what stops a fork bomb."""
    sandbox: SubprocessSandbox = await backend.open(Limits(timeout_s=30.0, pids=8))
    try:
        result = await sandbox.run(RunRequest(code=FORKS_UNTIL_REFUSED, language="python", limits=sandbox.limits))
        assert result.status is Status.OK, result
        assert sandbox.cgroup is not None and sandbox.cgroup.pids_dir is not None
        events = dict(line.split() for line in _lines(os.path.join(sandbox.cgroup.pids_dir, "pids.events")))
        print(f"forking at pids=8: {result.stdout.strip()} children, then pids.max refused {events['max']} fork(s)")
        assert int(result.stdout) < 8 + SERVER_PIDS  # the program itself is one of the sandbox's processes
        assert int(events["max"]) > 0
    finally:
        await sandbox.close()


def test_mountinfo_of_a_v1_container_host_names_each_controllers_mount(tmp_path: Path) -> None:
    """Co-mounted controllers (``cpu,cpuacct``) share one mount; a container's mounts have a root."""
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
        "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        "34 30 0:30 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "35 30 0:31 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
        "36 30 0:32 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids\n"
    )
    mounts = cgroup_mounts(str(mountinfo))
    assert mounts.unified == ("/sys/fs/cgroup/unified", "/")
    assert mounts.v1["cpu"] == mounts.v1["cpuacct"] == ("/sys/fs/cgroup/cpu,cpuacct", "/docker/abc")
    assert mounts.v1["memory"] == ("/sys/fs/cgroup/memory", "/docker/abc")
    assert host_path(mounts.v1["cpu"], "/docker/abc") == "/sys/fs/cgroup/cpu,cpuacct"
    assert host_path(mounts.v1["pids"], "/docker/abc") == "/sys/fs/cgroup/pids/docker/abc"


#: On cgroup v2 the kernel kills a whole cgroup at its first OOM (``memory.oom.group``); v1 has no such
#: switch, and there the OOM killer still takes one process at a time. A host is v1 or v2, not a component.
on_v2_memory_cgroup = pytest.mark.skipif(
    ISO.cgroup.memory_parent is not None
    and not os.path.exists(os.path.join(ISO.cgroup.memory_parent, "cgroup.controllers")),
    reason="the group OOM kill is cgroup v2's (memory.oom.group); this host's memory cgroup is v1",
)

#: One child takes more memory than the sandbox has and is OOM-killed; its sibling sleeps, and the parent
#: waits for both. Killed one at a time, the rest would wait out the timeout, as the 16-core v2 host's
#: twenty allocators did (docs/cgroups.md); killed as a group, the run ends at the first OOM.
ONE_CHILD_OVER_THE_LIMIT = """
import os, time
def child(work):
    pid = os.fork()
    if pid == 0:
        work()
        os._exit(0)
    return pid
def hog():
    block = bytearray(200 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
kids = [child(hog), child(hog), child(lambda: time.sleep(3600))]
for pid in kids:
    os.waitpid(pid, 0)
print("every child ended")
"""


@needs_memory_cgroup
@on_v2_memory_cgroup
async def test_the_first_oom_kill_ends_the_whole_sandbox_as_memory_exceeded(backend: RecordingBackend) -> None:
    """The program's own outcome (``memory_exceeded``), not a timeout, and no process of it stays behind."""
    run = await _run_at_256_mb(backend, ONE_CHILD_OVER_THE_LIMIT, timeout_s=20.0)
    print(f"two 200 MB children and a sleeper at memory_mb=256: {run.result.status.value}, {run.oom_kills} OOM kill(s)")
    assert run.result.status is Status.MEMORY_EXCEEDED, run.result
    assert "every child ended" not in run.result.stdout
    assert not os.path.exists(run.memory_dir)


#: Three children of 150 MB at memory_mb=256: together past the cgroup's limit.
BIG_CHILDREN = children_allocating(3, 150, then="survived", hold_s=2)


#: v1's OOM killer takes one process at a time, so a sandbox lives on after one; v2's group kill ends it
#: (and its server: the next command starts a new one, which reads the count afresh).
on_v1_memory_cgroup = pytest.mark.skipif(
    ISO.cgroup.memory_parent is not None
    and os.path.exists(os.path.join(ISO.cgroup.memory_parent, "cgroup.controllers")),
    reason="on cgroup v2 the first OOM kill ends the whole sandbox (memory.oom.group)",
)


@needs_memory_cgroup
@on_v1_memory_cgroup
async def test_an_oom_kill_between_two_commands_is_neither_s(backend: RecordingBackend) -> None:
    """A command's "before" count is the last command's "after" (one file read less per run), so an OOM
    kill between two commands, in the sandbox's kernel, must not make the next correct program
    ``memory_exceeded``; and one during a command is that command's."""
    sandbox: SubprocessSandbox = await backend.open(Limits(timeout_s=30.0, memory_mb=256, pids=64))
    try:
        first = await sandbox.run(RunRequest(code="print(1)", limits=sandbox.limits))
        assert first.status is Status.OK
        killed = await sandbox.run(RunRequest(code=BIG_CHILDREN, limits=sandbox.limits))
        assert killed.status is Status.MEMORY_EXCEEDED, killed
        assert (await sandbox.run(RunRequest(code="print(2)", limits=sandbox.limits))).status is Status.OK
        kernel = await sandbox.open_kernel()
        assert sandbox.cgroup is not None
        before = sandbox.cgroup.oom_kills()
        await kernel.run(BIG_CHILDREN)
        assert sandbox.cgroup.oom_kills() > before, "the kernel was not killed for memory"
        result = await sandbox.run(RunRequest(code="print(3)", limits=sandbox.limits))
        assert (result.status, result.stdout) == (Status.OK, "3\n"), result
    finally:
        await sandbox.close()
