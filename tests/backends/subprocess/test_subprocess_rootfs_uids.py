"""Rootfs sandboxes run as host uids of their own, so per-user kernel quotas are per sandbox.

The kernel counts some resources per user, across every namespace that user created: inotify
instances (``fs.inotify.max_user_instances``, 128 by default) and watches, POSIX message queue
bytes (``RLIMIT_MSGQUEUE``) and pending signals (``RLIMIT_SIGPENDING``). When every rootfs
sandbox ran as one host uid, one sandbox that held all 128 inotify instances made
``inotify_init`` fail in an unrelated sandbox of another pool.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._rootfs import ROOTFS_UID
from sandboxkit.models import Limits, RunRequest, Status
from support.marks import missing
from support.rootfs import CACHE, base_image_tarball

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="rootfs sandboxes mount an overlay per sandbox: root only"),
]
SLOW = Limits(timeout_s=30.0, output_bytes=1 << 16)
#: Takes every inotify instance the kernel gives this user, says so in a file, and keeps them a while.
HOLD = """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 200:
    fd = libc.inotify_init()
    if fd < 0:
        break
    held.append(fd)
open("/testbed/held", "w").write(str(len(held)))
time.sleep(8)
print(len(held), ctypes.get_errno())
"""
ONE = "import ctypes\nprint(ctypes.CDLL(None).inotify_init() >= 0)"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pools() -> AsyncIterator[tuple[SubprocessBackend, SubprocessBackend]]:
    tarball = base_image_tarball()
    if tarball is None:
        missing("no Docker engine or sandboxkit-base image to export (scripts/docker-setup.sh)")
    root = tempfile.mkdtemp(prefix=f"sandboxkit-rootfs-uids-p{os.getpid()}-")
    os.chmod(root, 0o711)
    backends = (
        SubprocessBackend(rootfs=tarball, rootfs_cache=CACHE, root=root),
        SubprocessBackend(rootfs=tarball, rootfs_cache=CACHE, root=root),
    )
    try:
        yield backends
    finally:
        for backend in backends:
            await backend.aclose()
        with open("/proc/self/mountinfo") as f:
            assert [line for line in f if f" {root}/" in line] == []  # overlays and idmapped images all gone
        shutil.rmtree(root, ignore_errors=True)


async def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 25
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


async def test_a_sandbox_holding_every_inotify_instance_starves_no_other_pool(
    pools: tuple[SubprocessBackend, SubprocessBackend],
) -> None:
    first, second = pools
    hog, victim = await first.open(SLOW), await second.open(SLOW)
    try:
        holding = asyncio.ensure_future(hog.run(RunRequest(code=HOLD, limits=SLOW)))
        assert hog.view is not None  # type: ignore[attr-defined]
        await _wait_for(Path(hog.view.workdir_host, "held"))  # type: ignore[attr-defined]
        meanwhile = await victim.run(RunRequest(code=ONE, limits=SLOW))
        held = await holding
        assert held.status is Status.OK and int(held.stdout.split()[0]) > 0, held
        assert (meanwhile.status, meanwhile.stdout) == (Status.OK, "True\n"), meanwhile
        assert hog.uid != victim.uid and ROOTFS_UID not in (hog.uid, victim.uid)  # type: ignore[attr-defined]
        assert not any("separate uid" in m for m in first.capabilities.missing_protections)
    finally:
        await hog.close()
        await victim.close()


async def test_the_program_is_root_of_its_image_and_host_writes_are_its_own(
    pools: tuple[SubprocessBackend, SubprocessBackend],
) -> None:
    sb = await pools[0].open(SLOW)
    try:
        await sb.write_files({"/testbed/from-host.txt": "h", "/etc/from-host.conf": "c"})
        look = "import os\nprint(*(os.stat(p).st_uid for p in ('/usr/bin', '/testbed/from-host.txt', '/etc/from-host.conf', '/etc/passwd')), os.getuid())"
        result = await sb.run(RunRequest(code=look, limits=SLOW))
        assert (result.status, result.stdout) == (Status.OK, "0 0 0 0 0\n"), result
        changed = await sb.exec("echo more >> /etc/passwd && chmod 600 /usr/bin/env && touch /usr/new && echo ok")
        assert changed.stdout == "ok\n", changed
        view = sb.view  # type: ignore[attr-defined]
        assert view is not None
        assert os.stat(os.path.join(view.root, "usr", "new")).st_uid == sb.uid  # type: ignore[attr-defined]
        assert os.stat(os.path.join(view.image.path, "usr", "bin", "env")).st_mode & 0o777 != 0o600  # image untouched
    finally:
        await sb.close()
