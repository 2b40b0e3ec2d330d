"""Helpers of the subprocess backend tests: a recording backend and host leak checks.

Leak checks read ``/proc`` directly: every process of a sandbox runs as that sandbox's
private uid (when the tests run as root), so "nothing left on the host" means: no process
with one of those uids other than the sandbox's own bwrap + fork server while it is open,
and none at all once it is closed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from sandboxkit.backends.subprocess import SubprocessBackend, SubprocessSandbox
from sandboxkit.models import Limits
from support.procs import pids, proc_stat

FAST = Limits(timeout_s=5.0, compile_timeout_s=60.0, output_bytes=1 << 20)


class RecordingBackend(SubprocessBackend):
    """A SubprocessBackend that remembers every sandbox it opened (for leak checks)."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.opened: list[SubprocessSandbox] = []

    async def open(self, limits: Limits | None = None) -> SubprocessSandbox:
        sb = await super().open(limits)
        self.opened.append(sb)
        return sb

    def without_bwrap(self) -> RecordingBackend:
        """Sandboxes opened from now on run without bubblewrap (as on a host that lacks it); returns self."""
        self.isolation = dataclasses.replace(self.isolation, bwrap=None, bwrap_error="disabled by the test")
        return self


def _proc_uid_ppid(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["Uid"].split()[0]), int(fields["PPid"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def processes_of(uids: set[int]) -> dict[int, str]:
    """pid -> command line of every live process running as one of ``uids`` (zombies excluded)."""
    out: dict[int, str] = {}
    for pid in pids():
        info = _proc_uid_ppid(pid)
        if info is None or info[0] not in uids:
            continue
        st = proc_stat(pid)
        if st is None or st.state == "Z":
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
        except OSError:
            continue
    return out


def server_tree(sb: SubprocessSandbox) -> set[int]:
    """The pids that legitimately live as long as the sandbox: bwrap (outer, init) and the fork server."""
    server = sb._server
    if server is None or server.proc is None or server.server_pid is None:
        return set()
    init = _proc_uid_ppid(server.server_pid)
    return {server.proc.pid, server.server_pid} | ({init[1]} if init else set())


def leftovers(backend: RecordingBackend) -> dict[int, str]:
    """Processes of this backend's sandboxes that are neither bwrap nor a fork server."""
    uids = {sb.uid for sb in backend.opened if sb.uid is not None}
    allowed: set[int] = set()
    for sb in backend.opened:
        allowed |= server_tree(sb)
    return {pid: cmd for pid, cmd in processes_of(uids).items() if pid not in allowed}


async def settled(probe: Callable[[], dict[int, str]], within_s: float = 3.0) -> dict[int, str]:
    """``probe()`` once what it finds has had ``within_s`` to go away (or at once when it finds nothing).

    A process that got SIGKILL, or a program past its last instruction, is still listed until the
    kernel schedules its exit; on a host at load 20 that takes tens of milliseconds. Something that
    is really left behind is still there after the grace, so the check keeps its teeth.
    """
    deadline = time.monotonic() + within_s
    found = probe()
    while found and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        found = probe()
    return found
