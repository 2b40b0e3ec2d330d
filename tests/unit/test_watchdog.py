"""The dead-man switch's TTL: derived from the pool's deadlines, and shown by ``sandboxkit doctor``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandboxkit import SandboxPool
from sandboxkit._watchdog import ttl_for, watchdog_command
from sandboxkit.models import Limits


def test_ttl_is_the_pool_deadline_else_the_limits() -> None:
    assert ttl_for(7.5, Limits()) == 7.5
    assert ttl_for(None, Limits(timeout_s=3, compile_timeout_s=2)) == 5.0
    assert ttl_for(0.01, Limits()) == 1.0  # renewals every quarter TTL: not below a second


async def test_a_shared_backend_takes_the_longest_pool_ttl() -> None:
    first = SandboxPool("subprocess", deadline_s=30.0)
    second = SandboxPool(first.backend, deadline_s=5.0)
    assert first.backend.owner_ttl_s == second.backend.owner_ttl_s == 30.0
    await second.aclose()
    await first.aclose()


def test_doctor_shows_the_ttl() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, "-m", "sandboxkit.cli", "doctor", "--no-docker"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "dead-man switch" in out.stdout and "40 s" in out.stdout


def test_the_watchdog_process_imports_no_sandboxkit_until_it_cleans_up(tmp_path: Path) -> None:
    """The watchdog starts with the first sandbox of every host process and of every backend root.

    Importing the ``sandboxkit`` package (pydantic, anyio, the pool: about 270 modules) only to wait
    for a pid cost each start a few hundred milliseconds of CPU, taken from the owner's first
    sandboxes on a busy host (issue 31). It needs the backend's code only once its owner is dead:
    here the cleanup names no backend, so nothing of sandboxkit may be imported at all.
    """
    lease = tmp_path / "owner.lease"
    lease.write_text(f"1.0\nsubprocess\n{tmp_path / 'root'}\nnot-a-backend:nothing\n")
    os.utime(lease, (0, 0))  # renewed last in 1970: long expired
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that names no live process: the owner is dead
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PYTHONPROFILEIMPORTTIME="1")
    out = subprocess.run(watchdog_command(gone.pid, str(lease)), capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")]
    assert imported  # the import log was written
    heavy = [name for name in imported if name.split(".")[0] in ("sandboxkit", "pydantic", "anyio")]
    assert heavy == []
    assert not lease.exists()  # it still ran to the end: owner dead, lease expired, file removed
