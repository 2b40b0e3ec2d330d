"""What the backend reports about its isolation: capabilities and ``sandboxkit doctor`` never claim
a protection the machine does not give."""

from __future__ import annotations

import dataclasses
import os

from typer.testing import CliRunner

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._cgroup import CgroupSupport
from sandboxkit.backends.subprocess._isolation import Isolation, bwrap_argv, probe
from sandboxkit.cli import app

FULL = Isolation(
    is_root=True,
    bwrap="/usr/bin/bwrap",
    bwrap_error="",
    disable_userns=True,
    cgroup=CgroupSupport(version=2, memory_parent="/sys/fs/cgroup/x", pids_parent="/sys/fs/cgroup/x"),
    tmpfs=True,
    tmpfs_error="",
)


def test_nothing_missing_when_every_mechanism_works() -> None:
    assert FULL.missing() == ()


def test_each_missing_mechanism_is_named() -> None:
    no_bwrap = dataclasses.replace(FULL, bwrap=None, bwrap_error="bwrap not installed")
    text = " | ".join(no_bwrap.missing())
    for layer in ("user namespace", "pid namespace", "network namespace", "mount namespace", "bubblewrap"):
        assert layer in text
    assert "apt-get install bubblewrap" in text

    not_root = dataclasses.replace(FULL, is_root=False, tmpfs=False, tmpfs_error="needs root")
    assert any(m.startswith("separate uid") for m in not_root.missing())
    assert any(m.startswith("disk quota") for m in not_root.missing())

    no_cgroup = dataclasses.replace(FULL, cgroup=CgroupSupport(missing=("memory limit: no writable cgroup",)))
    assert no_cgroup.missing() == ("cgroup: memory limit: no writable cgroup",)


def test_capabilities_match_this_machine() -> None:
    backend = SubprocessBackend()
    caps = backend.capabilities
    assert caps.missing_protections == probe().missing()
    assert caps.network_control == (probe().bwrap is not None)
    assert {"python", "bash"} <= caps.languages
    assert caps.stateful and caps.resettable
    assert any("bubblewrap" in note for note in caps.notes) == (probe().bwrap is not None)


def test_network_is_off_unless_asked() -> None:
    argv = bwrap_argv(FULL, bwrap="bwrap", workspace="/tmp/w/x", inner="/work", root="/tmp/w", network=False, tmp_mb=8)
    assert "--unshare-net" in argv
    argv = bwrap_argv(FULL, bwrap="bwrap", workspace="/tmp/w/x", inner="/work", root="/tmp/w", network=True, tmp_mb=8)
    assert "--unshare-net" not in argv


def test_other_workspaces_are_never_bound() -> None:
    root = "/var/tmp/sandboxkit-test-root"
    argv = bwrap_argv(FULL, bwrap="bwrap", workspace=f"{root}/mine", inner="/work", root=root, network=False, tmp_mb=8)
    bound = {argv[i + 1] for i, a in enumerate(argv) if a in ("--ro-bind-try", "--bind")}
    assert f"{root}/mine" in bound
    assert not any(p == root or p in ("/", "/tmp", "/var", "/var/tmp", "/root") for p in bound)


def test_doctor_lists_missing_protections() -> None:
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "backend subprocess" in result.output
    missing = SubprocessBackend().capabilities.missing_protections
    if missing:
        assert all(m[:30] in result.output.replace("\n", " ") for m in missing)
    else:
        assert "all isolation mechanisms available" in result.output
    assert os.path.exists("/usr/bin/bwrap") or "bubblewrap" in result.output


async def test_cleanup_removes_only_leftovers_of_dead_processes() -> None:
    import subprocess

    from sandboxkit.backends.subprocess._cgroup import PREFIX

    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid now names a process that no longer exists
    backend = SubprocessBackend()
    live = await backend.open()
    try:
        stale = os.path.join(backend.root, f"sbx-0123456789ab-p{dead.pid}-leftover")
        os.makedirs(os.path.join(stale, "sub"))
        cgroup_parent = backend.isolation.cgroup.pids_parent
        stale_cgroup = os.path.join(cgroup_parent, f"{PREFIX}sbx-0123456789ab-p{dead.pid}") if cgroup_parent else None
        if stale_cgroup:
            os.mkdir(stale_cgroup)
        assert await backend.cleanup() >= 1  # other crashed runs on this machine may add to the count
        assert not os.path.exists(stale)
        assert stale_cgroup is None or not os.path.exists(stale_cgroup)
        assert os.path.isdir(live.workspace.path), "a live sandbox must survive cleanup"
        assert (await live.exec("echo alive")).stdout == "alive\n"
    finally:
        await backend.aclose()
    assert not os.path.exists(live.workspace.path)
