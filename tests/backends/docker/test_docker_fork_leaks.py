"""Ctrl-C in the middle of ``pool.fork(checkpoint, n)`` on Docker leaves nothing (issue 16).

A child process checkpoints a session and forks it in a loop (into warm idle containers, or into
new ones), and the test SIGINTs it while it forks. The pool's own teardown must remove every
container and workspace volume, the checkpoint's archive must be gone with the process (it is an
unlinked file in the child's ``TMPDIR``), and ``sandboxkit cleanup --backend docker`` must then
find nothing. Killed (SIGKILL), the child cleans nothing up: ``cleanup`` must then remove all it
left. The child's containers carry this test's label (``SANDBOXKIT_DOCKER_LABELS``), so
other users of the engine are neither counted nor touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fakes._common import interrupt_when_ready, wait_until
from support.docker_engine import containers_of, leftovers, run_cleanup_cli

_SCRIPT = textwrap.dedent(
    """
    import asyncio, pathlib
    from sandboxkit import SandboxPool
    from sandboxkit.models import Limits

    async def main():
        # max_uses=1 closes every container when its session closes: each fork starts a new one.
        options = {{"max_uses": 1}} if {cold!r} else {{"warm": 5}}
        async with SandboxPool("docker", max_concurrency=5, max_sandboxes=5, limits=Limits(timeout_s=30), **options) as pool:
            parent = pool.session()
            await parent.write_files({{f"d{{i % 10}}/f{{i}}": bytes([i % 256]) * 50_000 for i in range(200)}})
            checkpoint = await parent.checkpoint()
            pathlib.Path({marker!r}).write_text("go")
            while True:
                forks = await pool.fork(checkpoint, 4)
                await asyncio.gather(*(f.close() for f in forks))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_sigint_mid_fork_leaves_nothing_for_cleanup(
    docker_client: Any, test_labels: dict[str, str], tmp_path: Path, cold: bool
) -> None:
    marker, tmpdir = tmp_path / "forking", tmp_path / "tmp"
    tmpdir.mkdir()
    env = {
        **os.environ,
        "SANDBOXKIT_DOCKER_LABELS": ",".join(f"{k}={v}" for k, v in test_labels.items()),
        "TMPDIR": str(tmpdir),
    }
    created: set[str] = set()

    def forking() -> bool:
        # Ready once the loop has gone round a few times: new containers keep appearing when cold.
        created.update(containers_of(docker_client, test_labels))
        return marker.exists() and len(created) >= (9 if cold else 5)

    def a_few_rounds_in() -> None:
        time.sleep(0.3)  # the signal lands while forks are loading, opening or closing

    script = _SCRIPT.format(cold=cold, marker=str(marker))
    err = interrupt_when_ready(script, env, forking, a_few_rounds_in, timeout_s=120)
    assert "KeyboardInterrupt" in err, err  # it was interrupted mid-loop, not crashed
    assert leftovers(docker_client, test_labels) == (0, 0), "containers or volumes left behind after Ctrl-C"
    # The dead-man switch's lease directory outlives its owner by design (its watchdog removes the owner's
    # sandboxes after the TTL); it holds lease files only. Anything else is a leak.
    leases = tmpdir / f"sandboxkit-watchdog-{os.geteuid()}"
    assert all(p.name.startswith(".owner-p") for p in leases.glob("*")), list(leases.iterdir())
    assert [p for p in tmpdir.iterdir() if p != leases] == [], "the checkpoint's archive outlived the process"
    assert "removed 0 sandbox(es)" in run_cleanup_cli(test_labels, TMPDIR=str(tmpdir))
    assert docker_client.api.images(filters={"label": [f"{k}={v}" for k, v in test_labels.items()]}) == []


def test_cleanup_after_a_kill_mid_fork_removes_everything(
    docker_client: Any, test_labels: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "forking"
    env = {**os.environ, "SANDBOXKIT_DOCKER_LABELS": ",".join(f"{k}={v}" for k, v in test_labels.items())}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT.format(cold=False, marker=str(marker))], env=env, stderr=subprocess.PIPE
    )
    try:
        assert wait_until(lambda: marker.exists() or proc.poll() is not None, 120), "the child never forked"
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.5)  # a few rounds of forks in
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The runners see their attach close and their containers remove themselves; the volumes stay.
    # (Waiting for that keeps cleanup from racing the engine's own removals on a loaded machine.)
    wait_until(lambda: leftovers(docker_client, test_labels)[0] == 0, 30)
    assert sum(leftovers(docker_client, test_labels)) > 0, "a kill left nothing: the test is void"
    assert "removed 0 sandbox(es)" not in run_cleanup_cli(test_labels)
    assert leftovers(docker_client, test_labels) == (0, 0)
