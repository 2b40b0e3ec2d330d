"""Start one process from the host per command, in its own session (the path without a fork server).

Used only when the sandbox has no ``python3`` to run its fork server. The process gets the
same isolation wrapper and uid as a fork server would, its rlimits in the forked child before
``exec`` (``preexec_fn``: acceptable on this rare path), a new session (so the whole process
group can be killed), and pipes the host drains concurrently.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sandboxkit.backends.subprocess._output import Drain, OutputLimits
from sandboxkit.backends.subprocess._status import Outcome

__all__ = ["Command", "run_from_host"]

#: How long to wait for output pipes to close after the main process exited (a background
#: child may still hold them) before killing the group and giving up on the rest.
EOF_GRACE_S = 0.2


@dataclass
class Command:
    """One process to run in a sandbox."""

    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str]
    stdin: bytes
    timeout_s: float
    output: OutputLimits
    rlimits: Sequence[tuple[int, int]]
    prefix: Sequence[str] = ()  # isolation wrapper (bwrap ... --), if any
    user: tuple[int, int] | None = None  # host (uid, gid) to run as
    pass_fds: Sequence[int] = ()  # descriptors the prefix refers to (bwrap --seccomp FD); closed here


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _wait_pid(pid: int) -> None:
    loop = asyncio.get_running_loop()
    fd = os.pidfd_open(pid)
    done = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def run_from_host(cmd: Command) -> Outcome:
    """Run ``cmd`` as a fresh process; kill its process group on timeout or overflow.

    Raises:
        FileNotFoundError: the program does not exist (the caller maps it to ToolchainMissing).
    """
    limits = list(cmd.rlimits)

    def child_setup() -> None:  # runs in the child between fork and exec
        import resource

        for res, value in limits:
            resource.setrlimit(res, (value, value))

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.perf_counter()
    try:
        uid, gid = cmd.user if cmd.user is not None else (None, None)
        proc = subprocess.Popen(
            [*cmd.prefix, *cmd.argv],
            cwd=cmd.cwd,
            env=dict(cmd.env),
            stdin=in_r,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
            user=uid,
            group=gid,
            extra_groups=[] if uid is not None else None,
            preexec_fn=child_setup,
            pass_fds=tuple(cmd.pass_fds),
        )
    except BaseException:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w, *cmd.pass_fds):
            try:
                os.close(fd)
            except OSError:
                pass
    pgid = proc.pid
    drain = Drain(out_r, err_r, in_w, cmd.stdin, cmd.output, lambda: _killpg(pgid))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(_wait_pid(proc.pid), cmd.timeout_s)
        except asyncio.TimeoutError:
            timed_out = True
            _killpg(pgid)
        if not await drain.wait_eof(EOF_GRACE_S):
            _killpg(pgid)
            await drain.wait_eof(EOF_GRACE_S)
    finally:
        _killpg(pgid)
        drain.close()
        returncode = proc.wait()
    return drain.outcome(returncode, time.perf_counter() - started, timed_out=timed_out)
