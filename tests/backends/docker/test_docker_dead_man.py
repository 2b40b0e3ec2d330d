"""The dead-man switch on Docker: a SIGKILLed owner's containers and volumes go after the TTL, without ``cleanup``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Any

from support.docker_engine import leftovers

_CHILD = textwrap.dedent(
    """
    import asyncio
    from sandboxkit import SandboxPool

    async def main() -> None:
        pool = SandboxPool("docker", max_concurrency=16, deadline_s=2.0)
        sessions = [pool.session() for _ in range(16)]
        await asyncio.gather(*(s.exec("sleep 1000 > /dev/null 2>&1 &", deadline_s=300) for s in sessions))
        print("ready", flush=True)
        await asyncio.sleep(1000)

    asyncio.run(main())
    """
)


def test_sigkilled_owner_leaves_no_container_after_ttl(docker_client: Any, test_labels: dict[str, str]) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "SANDBOXKIT_DOCKER_LABELS": ",".join(f"{k}={v}" for k, v in test_labels.items()),
    }
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        assert leftovers(docker_client, test_labels)[0] == 16
    finally:
        child.kill()
        child.wait()
    left = leftovers(docker_client, test_labels)
    for _ in range(600):  # the TTL is 2 s (the pool's deadline); removing 16 containers takes a while here
        left = leftovers(docker_client, test_labels)
        if left == (0, 0):
            break
        time.sleep(0.2)
    assert left == (0, 0), "the dead owner's containers or volumes outlived the TTL"
