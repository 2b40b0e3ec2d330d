"""The cloud dead-man switch, for both fakes: a SIGKILLed owner's sandboxes expire at the service.

A child process opens 16 sessions through a pool with a short ``deadline_s`` (the TTL), says
``ready`` and sleeps; the test SIGKILLs it, so nothing of sandboxkit runs afterwards, and then
only the fake's own lifetimes (E2B's timeout, Daytona's auto-stop of an ephemeral sandbox) can
remove the sandboxes. Nobody calls ``cleanup``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

SESSIONS = 16

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from sandboxkit import SandboxPool

    async def main(backend: str, deadline_s: float) -> None:
        pool = SandboxPool(backend, max_sandboxes=16, deadline_s=deadline_s, backend_options={"grace_s": 5.0})
        sessions = [pool.session() for _ in range(16)]
        await asyncio.gather(*(s.write_files({"mine.txt": "x"}) for s in sessions))
        print("ready", flush=True)
        await asyncio.sleep(1000)

    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
    """
)


@contextmanager
def owner(backend: str, env: Mapping[str, str], deadline_s: float) -> Iterator[subprocess.Popen[bytes]]:
    """A child process holding 16 sessions of ``backend`` (ready when this yields); SIGKILLed on exit if alive."""
    full_env = dict(os.environ, **env, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, backend, str(deadline_s)], stdout=subprocess.PIPE, env=full_env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n", "the child could not open its sessions"
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()


def kill(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the owner: no finally, no atexit, no renewal after this."""
    child.send_signal(signal.SIGKILL)
    child.wait()
