"""Start a Docker sandbox's Python kernel: ``docker exec -i`` of the kernel program, as the program's user.

The kernel runs in the sandbox's own container, so it has every confinement a program has
there: the container's namespaces, memory, CPU and pids limits, seccomp profile, read-only
root, no network unless the sandbox has it, and uid 1000 with no capability. The cell-running
worker gets a program's rlimits (file size, open files, no core dumps); CPU time is left out,
since it would add up over a session's cells (the per-cell timeout holds a busy cell instead).

The exec's stdin and stdout are the kernel protocol, carried on the exec's attached socket
(multiplexed exactly like the runner's, so :class:`RunnerChannel` demultiplexes it). The
in-sandbox supervisor is a child subreaper: a fork bomb's processes stay below it, and it kills
them all when a cell times out or when its stdin closes. Closing the socket is therefore the
kill switch; if the supervisor was stopped (a cell may signal it: same uid) the host also kills
it by its host pid, after checking that pid still runs our kernel program.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from sandboxkit.backends.docker import _engine
from sandboxkit.backends.docker._channel import ChannelClosed, RunnerChannel
from sandboxkit.backends.docker._results import NOFILE, base_env
from sandboxkit.kernel import KernelLink, kernel_argv, process_tree
from sandboxkit.kernel._client import KERNEL_SOURCE
from sandboxkit.models import Limits

__all__ = ["ExecLink", "start_kernel"]

#: How long the supervisor gets to kill its tree and exit once its stdin closes (then the host kills it).
SELF_KILL_WAIT_S = 0.2
#: A line of the kernel program's source, to recognise its process by its command line.
_MARK = KERNEL_SOURCE.splitlines()[0].encode()


def start_kernel(client: Any, container_id: str, limits: Limits, workdir: str, sandbox_id: str) -> ExecLink:
    """``docker exec -i`` the kernel in the container (run in a worker thread: SDK calls block).

    Args:
        client: the docker SDK client.
        container_id: the sandbox's container.
        limits: the sandbox's limits (the kernel's cell timeout, memory, file size).
        workdir: the workspace's path in the container (the kernel's working directory).
        sandbox_id: for messages.
    """
    rlimits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, NOFILE)]
    if limits.file_size_mb is not None:
        rlimits.append((resource.RLIMIT_FSIZE, limits.file_size_mb << 20))
    api = client.api
    created = api.exec_create(
        container_id,
        kernel_argv("python3", limits, rlimits),
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        user=f"{_engine.SANDBOX_UID}:{_engine.SANDBOX_UID}",
        workdir=workdir,
        environment=base_env(workdir, None, {}),
    )
    owner = api.exec_start(created["Id"], socket=True)
    sock = getattr(owner, "_sock", owner)
    sock.setblocking(False)
    return ExecLink(RunnerChannel(sock, owner, sandbox_id), lambda: api.exec_inspect(created["Id"]))


class ExecLink(KernelLink):
    """The kernel's exec socket; ``inspect`` reads the exec's state from the engine (its host pid)."""

    def __init__(self, channel: RunnerChannel, inspect: Callable[[], Mapping[str, Any]]) -> None:
        self._channel = channel
        self._inspect = inspect
        self._pid = 0
        self._dead = False

    def host_pid(self) -> int:
        """The supervisor's pid as this host sees it (0 if unknown); asked of the engine once."""
        if self._pid == 0:
            with contextlib.suppress(Exception):
                self._pid = int(self._inspect().get("Pid") or 0)
        return self._pid

    async def write(self, data: bytes) -> None:
        try:
            await self._channel.send_raw(data)
        except ChannelClosed as exc:
            self._dead = True
            raise ConnectionError(str(exc)) from exc

    async def read(self) -> bytes:
        data = await self._channel.read_stdout()
        if not data:
            self._dead = True
        return data

    def alive(self) -> bool:
        # b"" from a peek: the exec ended (nothing else is sent between cells)
        return not (self._dead or self._channel.ended) and self._channel.peer_open()

    def kill(self) -> None:
        if self._dead and self._channel.closed:
            return
        self._dead = True
        self.host_pid()  # before the exec ends: the engine forgets its pid then
        self._channel.close()  # the supervisor sees its stdin close and kills everything below it
        if not self._ours():
            return
        deadline = time.monotonic() + SELF_KILL_WAIT_S
        while time.monotonic() < deadline and self._ours():
            time.sleep(0.005)
        if self._ours():  # stopped or starved: kill it and what is below it from here
            for pid in process_tree(self._pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def _ours(self) -> bool:
        """Whether the host pid still runs our kernel's supervisor (never signal a recycled pid)."""
        if self._pid <= 0:
            return False
        try:
            with open(f"/proc/{self._pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{self._pid}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except (OSError, IndexError):
            return False
        return not zombie and _MARK in cmdline
