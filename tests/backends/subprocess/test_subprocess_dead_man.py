"""The dead-man switch on the subprocess backend: a SIGKILLed owner leaves nothing once its TTL passes.

Nobody runs ``cleanup`` here: the watchdog the pool started must remove the dead owner's
processes, cgroups, mounts and workspaces by itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from support.procs import pids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and mounts need root")

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from sandboxkit import SandboxPool

    async def main(root: str) -> None:
        pool = SandboxPool("subprocess", backend_options={"root": root}, max_concurrency=16, deadline_s=2.0)
        sessions = [pool.session() for _ in range(16)]
        for s in sessions:
            await s.exec("sleep 1000 > /dev/null 2>&1 &", deadline_s=120)  # a background process, where the backend keeps it
            await s.python("import threading, time; threading.Thread(target=time.sleep, args=(1000,)).start()", deadline_s=120)
        print("ready", flush=True)
        await asyncio.sleep(1000)

    asyncio.run(main(sys.argv[1]))
    """
)


def _tagged(pid: int) -> list[str]:
    """Every cgroup directory, mount and workspace whose name carries the owner's pid tag."""
    tag = f"-p{pid}"
    found: list[str] = []
    for hierarchy in os.listdir("/sys/fs/cgroup"):
        top = os.path.join("/sys/fs/cgroup", hierarchy)
        for dirpath, dirnames, _ in os.walk(top):
            found += [os.path.join(dirpath, d) for d in dirnames if tag in d]
    with open("/proc/self/mountinfo") as f:
        found += [line.split()[4] for line in f if tag in line.split()[4]]
    return found


def _processes_below(workspace_root: str) -> list[int]:
    """Processes whose cwd or root lies in a workspace under ``workspace_root``."""
    out = []
    for pid in pids():
        for link in ("cwd", "root"):
            try:
                if os.readlink(f"/proc/{pid}/{link}").startswith(workspace_root + "/"):
                    out.append(pid)
            except OSError:
                pass
    return out


def test_sigkilled_owner_leaves_nothing_after_ttl() -> None:
    root = os.path.realpath(tempfile.mkdtemp(prefix="sandboxkit-deadman-"))  # sandboxes' uids must traverse it
    os.chmod(root, 0o711)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, root], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        assert _tagged(child.pid), "the child's sandboxes must exist before the kill"
        assert len(os.listdir(root)) >= 16
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    leftover: list[object] = []
    for _ in range(300):  # the TTL is 2 s (the pool's deadline); the watchdog polls; 30 s is far past it
        leftover = _tagged(child.pid) + _processes_below(root) + [e for e in os.listdir(root) if f"-p{child.pid}" in e]
        if not leftover:
            break
        time.sleep(0.1)
    assert leftover == [], "the dead owner's sandboxes outlived the TTL"
    os.rmdir(root)
