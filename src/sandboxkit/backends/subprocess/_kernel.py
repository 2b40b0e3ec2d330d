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
import resource
import signal
import subprocess
import time
from typing import TYPE_CHECKING

from sandboxkit.backends.subprocess._freeze import Freezer
from sandboxkit.errors import ToolchainMissing
from sandboxkit.kernel import PipeLink, kernel_argv, process_tree
from sandboxkit.languages import resolve_language

if TYPE_CHECKING:
    from sandboxkit.backends.subprocess._sandbox import SubprocessSandbox

__all__ = ["start_kernel"]

#: Without bubblewrap: how long the supervisor gets to kill its own tree once its stdin closes.
SELF_KILL_WAIT_S = 0.2


def start_kernel(sandbox: SubprocessSandbox) -> PipeLink:
    """Start the kernel program in ``sandbox`` and return its link (ready or not: the client waits).

    Raises:
        ToolchainMissing: the sandbox has no ``python3``.
        InvalidRequest: the sandbox's limits cannot be applied.
    """
    python = sandbox._backend.server_python
    if python is None:
        raise ToolchainMissing(
            f"a Python kernel needs python3 on the sandbox PATH {sandbox._backend.path!r}; install python3",
            backend="subprocess",
            sandbox_id=sandbox.id,
        )
    limits = sandbox.limits
    sandbox._apply_cgroup(limits)
    rlimits = [
        r for r in sandbox._rlimits(limits, limits.timeout_s, resolve_language("python")) if r[0] != resource.RLIMIT_CPU
    ]
    prefix, fds = sandbox._prefix(limits.network)
    argv = [*prefix, *kernel_argv(python, limits, rlimits)]
    procs = [os.path.join(d, "cgroup.procs") for d in sandbox.cgroup.dirs] if sandbox.cgroup is not None else []
    freezer = Freezer.create(sandbox.cgroup, sandbox.id) if sandbox.uid is not None else None
    if freezer is not None and freezer.procs is not None:
        procs.append(freezer.procs)  # frozen whenever the host touches the sandbox's files (``_freeze``)
    user = (sandbox.uid, sandbox.uid) if sandbox.uid is not None else None

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
            cwd=sandbox.workspace.path,
            env=sandbox._env(None),
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
    sandbox._freezer = freezer
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
            if sandbox._freezer is freezer:
                sandbox._freezer = None
            freezer.remove()

    return PipeLink(proc, kill)


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
