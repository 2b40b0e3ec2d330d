"""The dead-man switch's TTL: derived from the pool's deadlines, and shown by ``sandboxkit doctor``."""

from __future__ import annotations

import os
import subprocess
import sys

from sandboxkit import SandboxPool
from sandboxkit._watchdog import ttl_for
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
