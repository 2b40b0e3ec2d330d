"""Start a sandbox's Python kernel with every protection a command of the sandbox gets.

The kernel (``sandboxkit.kernel._kernel_main``) cannot live inside the fork server: the
server runs one command at a time and sweeps every leftover process after each. So it gets
its own instance of the sandbox's wrapper, built by the same code: the same bubblewrap
namespaces around the same workspace, the same seccomp filter, the sandbox's private uid and
its cgroup (joined before ``exec``, so nothing of the kernel ever runs outside it; on cgroup v1
also a freezer cgroup, so the host can hold it still while it touches the sandbox's files), and the
command's rlimits on the process that runs cells (minus CPU time, which would add up over a
session; the per-cell timeout holds a busy cell instead).

Killing it: under bubblewrap the kernel has its own PID namespace, so killing bwrap's process
group ends every process a cell started, whatever it did (``setsid``, double fork). Without
bubblewrap the in-sandbox supervisor kills its own tree when its stdin closes (it is a child
subreaper, so nothing below it escapes), and the process group is killed after that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sandboxkit.backends.subprocess._cgroup import SandboxCgroup
from sandboxkit.backends.subprocess._freeze import Freezer
from sandboxkit.kernel import PipeLink, kernel_argv, process_tree
from sandboxkit.models import Limits

__all__ = ["KernelLaunch", "start_kernel"]

#: Without bubblewrap: how long the supervisor gets to kill its own tree once its stdin closes.
SELF_KILL_WAIT_S = 0.2


@dataclass(frozen=True)
class KernelLaunch:
    """How one sandbox starts its kernel: what its sandbox worked out (its confinement is the sandbox's idea).

    Attributes:
        python: the sandbox's ``python3``.
        limits: the sandbox's limits (the kernel's cell timeout and memory).
        rlimits: the rlimits of the process that runs cells (no CPU time: it adds up over a session).
        prefix: the sandbox's namespace wrapper (empty without bubblewrap), with ``pass_fds``, the
            descriptors it names, which this closes once the kernel started.
        cwd: host path of the workspace.
        env: the program environment.
        cgroup: the sandbox's cgroup, joined before ``exec``; None when there is none.
        uid: the sandbox's private host uid (None: not root); also whether a freezer is made.
        sandbox_id: for the freezer's name.
        forget_freezer: called with the kernel's freezer once the kernel is killed and the freezer gone.
    """

    python: str
    limits: Limits
    rlimits: Sequence[tuple[int, int]]
    prefix: Sequence[str]
    pass_fds: Sequence[int]
    cwd: str
    env: Mapping[str, str]
    cgroup: SandboxCgroup | None
    uid: int | None
    sandbox_id: str
    forget_freezer: Callable[[Freezer], None]


def start_kernel(launch: KernelLaunch) -> tuple[PipeLink, Freezer | None]:
    """Start the kernel program as ``launch`` says; return its link (ready or not: the client waits) and its
    freezer (the host holds it still while it touches the sandbox's files), if any.
    """
    prefix, fds, limits, rlimits = launch.prefix, launch.pass_fds, launch.limits, launch.rlimits
    argv = [*prefix, *kernel_argv(launch.python, limits, list(rlimits))]
    procs = [os.path.join(d, "cgroup.procs") for d in launch.cgroup.dirs] if launch.cgroup is not None else []
    freezer = Freezer.create(launch.cgroup, launch.sandbox_id) if launch.uid is not None else None
    if freezer is not None and freezer.procs is not None:
        procs.append(freezer.procs)  # frozen whenever the host touches the sandbox's files (``_freeze``)
    user = (launch.uid, launch.uid) if launch.uid is not None else None

    def child_setup() -> None:  # between fork and exec: join the cgroup as root, then drop to the sandbox uid
        for path in procs:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        if user is not None:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=launch.cwd,
            env=dict(launch.env),
            start_new_session=True,
            preexec_fn=child_setup,
            pass_fds=fds,
        )
    except BaseException:
        if freezer is not None:
            freezer.remove()
        raise
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    isolated = bool(prefix)

    def kill() -> None:
        if freezer is not None:
            freezer.thaw()  # a v1-frozen task takes SIGKILL only once thawed
        if not isolated and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the supervisor kills everything below it and exits
            deadline = time.monotonic() + SELF_KILL_WAIT_S
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        tree = process_tree(proc.pid)[1:]  # below bwrap: proc itself is waited for
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap's init dies with it, and the PID namespace with that
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.SubprocessError):
            proc.wait(5)
        _wait_gone(tree)  # so "reset" and "close" mean no process of the kernel is left when they return
        if freezer is not None:
            launch.forget_freezer(freezer)
            freezer.remove()

    return PipeLink(proc, kill), freezer


def _wait_gone(pids: list[int], wait_s: float = 2.0) -> None:
    deadline = time.monotonic() + wait_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                        break
            except (OSError, IndexError):
                break
            time.sleep(0.002)
