"""Ctrl-C (or a kill) while forking: nothing is left, or ``cleanup`` removes all of it.

A child Python process prepares a session, checkpoints it and forks 16 sessions in a loop;
the test interrupts it mid-fork. After SIGINT the pool's own teardown must leave nothing (no
directory, mount or process under its root) and ``cleanup`` must find nothing; after SIGKILL
nothing ran, so ``cleanup`` must find and remove all of it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from sandboxkit.backends.subprocess import SubprocessBackend

_SCRIPT = textwrap.dedent(
    """
    import asyncio, pathlib
    from sandboxkit import SandboxPool

    async def main():
        async with SandboxPool("subprocess", max_concurrency=20, backend_options={{"root": {root!r}}}) as pool:
            parent = pool.session()
            await parent.write_files({{f"d{{i % 10}}/f{{i}}": b"x" * 10_000 for i in range(300)}})
            await parent.exec("echo ready")
            checkpoint = await parent.checkpoint()
            pathlib.Path({marker!r}).write_text("go")
            while True:
                for s in await pool.fork(checkpoint, 16):
                    await s.close()

    asyncio.run(main())
    """
)


@pytest.fixture
def root() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="sandboxkit-forkleak-")
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _mounts_under(root: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(root + "/")]


def _processes_in(root: str) -> list[int]:
    """Processes whose working directory or command line is under ``root`` (a sandbox's)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(root) or root in cmd:
            out.append(int(entry))
    return out


def _cgroups_of(pid: int) -> list[str]:
    """The sandbox cgroups a process created (their names end in ``-p<pid>``), wherever they are."""
    from sandboxkit.backends.subprocess._cgroup import PREFIX

    support = SubprocessBackend().isolation.cgroup
    found = []
    for parent in {support.memory_parent, support.pids_parent} - {None}:
        assert parent is not None
        found += [e for e in os.listdir(parent) if e.startswith(PREFIX) and e.endswith(f"-p{pid}")]
    return found


def _interrupt_mid_fork(root: str, tmp_path: Path, sig: signal.Signals) -> int:
    marker = tmp_path / "ready"
    script = _SCRIPT.format(root=root, marker=str(marker))
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the child never forked"
            time.sleep(0.02)
        time.sleep(0.3)  # a few fork rounds in: the signal lands while forks are opening or closing
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.pid


def test_sigint_mid_fork_leaves_nothing(root: str, tmp_path: Path) -> None:
    pid = _interrupt_mid_fork(root, tmp_path, signal.SIGINT)
    # What `cleanup` would look for, scoped to this child (cleanup itself sweeps every dead owner).
    assert _mounts_under(root) == []
    assert os.listdir(root) == []
    assert _processes_in(root) == []
    assert _cgroups_of(pid) == []


def test_cleanup_after_a_kill_mid_fork_removes_everything(root: str, tmp_path: Path) -> None:
    pid = _interrupt_mid_fork(root, tmp_path, signal.SIGKILL)
    assert os.listdir(root), "a killed process left nothing: the test did not interrupt a fork"
    time.sleep(0.2)  # the killed process's sandboxes' processes are SIGKILLed by their parent's death
    backend = SubprocessBackend(root=root)
    assert anyio.run(backend.cleanup) >= 2  # the checkpoint and at least one sandbox
    assert _mounts_under(root) == []
    assert os.listdir(root) == []
    assert _processes_in(root) == []
    assert _cgroups_of(pid) == []
