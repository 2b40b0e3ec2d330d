"""The host's per-run work on the warm path (issue 30: host CPU per run).

A pooled run on a warm sandbox asks several times whether the fork server still lives. Each ask
is a ``waitpid`` syscall; a process once dead stays dead, and a server that dies between two asks
is seen by the command itself (its socket closes), so one ask per step is enough. The bound is
on the count, not on time: counts do not depend on the machine's load.
"""

from __future__ import annotations

import subprocess

from sandboxkit.pool import SandboxPool
from support.subprocess_sandboxes import RecordingBackend

#: asks of the server's liveness per warm pooled run: the reset's report check, the lease's
#: server lookup and the command itself.
MAX_POLLS_PER_RUN = 3


async def test_a_warm_pooled_run_asks_the_server_for_liveness_at_most_three_times(
    pool: SandboxPool, backend: RecordingBackend
) -> None:
    await pool.run("print(1)")  # the previous tenant's report is pending, as in steady state
    (sandbox,) = backend.opened
    server = sandbox._server
    assert server is not None and server.proc is not None
    polls = 0
    real_poll = server.proc.poll

    def counting_poll() -> int | None:
        nonlocal polls
        polls += 1
        code: int | None = real_poll()
        return code

    server.proc.poll = counting_poll  # type: ignore[method-assign]
    runs = 5
    for _ in range(runs):
        result = await pool.run("print(1)")
        assert result.stdout == "1\n"
    assert sandbox._server is server, "the warm path restarted the server"
    assert isinstance(server.proc, subprocess.Popen)
    assert polls <= MAX_POLLS_PER_RUN * runs, f"{polls / runs:.1f} liveness asks per run"
