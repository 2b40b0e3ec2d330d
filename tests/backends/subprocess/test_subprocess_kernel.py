"""The subprocess backend's Python kernel: isolated like a command, killed with its sandbox.

The shared checks (``support.kernels``) drive the kernel; the ``backend`` fixture fails a test
that leaves any process of its sandboxes' uids behind after closing them.
"""

from __future__ import annotations

import os
import signal

import pytest

from sandboxkit import SandboxPool, SyncSandboxPool
from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.errors import InvalidRequest, SandboxCrashed
from sandboxkit.kernel import CellStatus, PipeLink
from sandboxkit.models import Limits
from support import kernels
from support.marks import missing
from support.procs import proc_stat
from support.subprocess_sandboxes import FAST, RecordingBackend, leftovers, processes_of

SMALL = FAST.merged(output_bytes=4096, output_stop_bytes=1 << 20, memory_mb=256, pids=64)


async def test_state_and_rendering(sandbox: SubprocessSandbox) -> None:
    assert sandbox._backend.capabilities.kernels
    await kernels.check_state_and_rendering(sandbox)


async def test_ipython_mode(sandbox: SubprocessSandbox) -> None:
    """The host's python3 is the sandboxes' (scripts/toolchains.sh installs python3-ipython there)."""
    if not await kernels.check_shell_mode(sandbox):
        missing("the sandbox's python3 has no IPython: the kernel fell back to plain Python")


async def test_hostile_cells(backend: RecordingBackend) -> None:
    sb = await backend.open(SMALL)
    try:
        await kernels.check_hostile_cells(sb, memory_status=(CellStatus.ERROR, CellStatus.CRASHED))
        assert leftovers_of_kernel(backend, sb) == {}, "a cell's processes outlived it"
    finally:
        await sb.close()


async def test_shell_escapes_stay_in_the_sandbox(backend: RecordingBackend) -> None:
    """``!cmd`` (IPython) is a subprocess of the cell: the sandbox's uid and view, killed when the cell ends."""
    sb = await backend.open(SMALL)
    try:
        command = await sb.exec("pwd; id -u")
        escaped = await kernels.cell(sb, "!pwd; id -u; (setsid sleep 300 &)")
        if escaped.shell != "ipython":
            missing("the sandbox's python3 has no IPython: no shell escapes to check")
        assert escaped.ok and escaped.stdout == command.stdout, escaped
        assert leftovers_of_kernel(backend, sb) == {}, "a process started by !cmd outlived its cell"
        hist = await kernels.cell(sb, "import os\n[p for p in os.listdir('.') if 'ipython' in p.lower()]")
        assert hist.value == "[]", hist  # nothing of IPython's lands in the workspace
    finally:
        await sb.close()


async def test_pids_come_back(backend: RecordingBackend) -> None:
    sb = await backend.open(SMALL)
    try:
        await kernels.check_pids_come_back(sb, 64)
    finally:
        await sb.close()


async def test_output_limits_and_fresh(backend: RecordingBackend) -> None:
    sb = await backend.open(SMALL)
    try:
        await kernels.check_output_limits(sb, SMALL.output_bytes)
        await kernels.check_fresh(sb)
    finally:
        await sb.close()


async def test_kernel_runs_isolated(sandbox: SubprocessSandbox) -> None:
    """Same namespaces, uid, workspace view and network as a command: nothing of the host shows."""
    probe = (
        "import os, socket\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1); net = 'up'\n"
        "except OSError:\n    net = 'down'\n"
        "(os.getcwd(), os.getuid(), sorted(os.environ) == sorted(k for k in os.environ if k != 'SECRET'), net,"
        " os.getpid() < 10)"
    )
    os.environ["SECRET"] = "host-secret"
    try:
        result = await kernels.cell(sandbox, probe)
    finally:
        del os.environ["SECRET"]
    command = await sandbox.exec("pwd; id -u")
    cwd, uid = command.stdout.split()
    assert result.value == f"({cwd!r}, {uid}, True, 'down', True)", result


async def test_reset_and_close_kill_the_kernel(backend: RecordingBackend) -> None:
    sb = await backend.open(FAST)
    kernel = await sb.open_kernel()
    await kernel.run("x = 1")
    assert leftovers(backend), "the kernel should be running"
    assert await sb.reset()
    assert leftovers(backend) == {}, "reset left the kernel running"
    assert kernel.closed and (await sb.open_kernel()) is not kernel
    fresh = await kernels.cell(sb, "'x' in dir()")
    assert fresh.value == "False" and not fresh.restarted  # a new tenant's kernel, not a restart
    uids = {sb.uid}
    await sb.close()
    assert processes_of(uids) == {}
    with pytest.raises(SandboxCrashed):
        await sb.open_kernel()


async def test_kernel_killed_between_cells_says_state_lost(sandbox: SubprocessSandbox) -> None:
    kernel = await sandbox.open_kernel()
    await kernel.run("x = 1")
    link = kernel._link
    assert isinstance(link, PipeLink)
    os.killpg(link.proc.pid, signal.SIGKILL)
    link.proc.wait(5)
    result = await kernel.run("'x' in dir()")
    assert result.ok and result.value == "False" and result.state_lost and result.restarted, result


async def test_bad_requests_are_invalid(sandbox: SubprocessSandbox) -> None:
    kernel = await sandbox.open_kernel()
    for kw in ({"timeout": 0}, {"timeout": -1.0}, {"timeout": True}):
        with pytest.raises(InvalidRequest):
            await kernel.run("1", **kw)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await kernel.run(b"1")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await kernel.run("'\ud800'")
    assert (await kernel.run("1")).value == "1"


async def test_session_python_async_and_sync(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, limits=FAST) as pool, pool.session() as session:
        assert (await session.python("def f():\n    return 'f'")).ok
        assert (await session.python("f()")).value == "'f'"
        with pytest.raises(InvalidRequest):
            await session.python("1", timeout=-1)
    with SyncSandboxPool("subprocess", limits=Limits(timeout_s=5.0)) as sync_pool, sync_pool.session() as twin:
        assert twin.python("y = 2").ok
        assert twin.python("y * 3").value == "6"


def leftovers_of_kernel(backend: RecordingBackend, sb: SubprocessSandbox) -> dict[int, str]:
    """Processes of ``sb`` other than its fork server tree and its kernel's bwrap, supervisor and worker."""
    found = leftovers(backend)
    kernel = sb._kernel
    link = kernel._link if kernel is not None else None
    if isinstance(link, PipeLink):
        tree = {link.proc.pid}
        for pid in list(found):
            if _ancestor(pid, link.proc.pid) and "sleep" not in found[pid]:
                tree.add(pid)
        found = {pid: cmd for pid, cmd in found.items() if pid not in tree}
    return found


def _ancestor(pid: int, root: int) -> bool:
    while pid > 1:
        if pid == root:
            return True
        st = proc_stat(pid)
        if st is None:
            return False
        pid = st.ppid
    return False


async def test_stopped_supervisor(backend: RecordingBackend) -> None:
    sb = await backend.open(FAST)
    try:
        await kernels.check_stopped_supervisor(sb)
        assert leftovers_of_kernel(backend, sb) == {}, "the stopped kernel was left behind"
    finally:
        await sb.close()


async def test_session_that_replaces_its_sandbox_says_state_lost(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, limits=FAST) as pool, pool.session() as session:
        assert (await session.python("x = 1")).ok
        entry = session._entry
        assert entry is not None
        await entry.sandbox.close()  # the sandbox dies under the session (an infrastructure failure)
        with pytest.raises(SandboxCrashed):
            await session.python("x")
        after = await session.python("'x' in dir()")
        assert after.value == "False" and after.state_lost and after.restarted, after
        assert session.restarts == 1


async def test_without_bubblewrap_the_supervisor_cleans_up(backend: RecordingBackend) -> None:
    """No PID namespace to kill: the subreaper supervisor ends its tree (the fixture checks the uid is empty)."""
    backend.without_bwrap()
    sb = await backend.open(SMALL)
    try:
        await kernels.cell(sb, "kept = 1")
        escape = "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(60)\nwhile True:\n    pass"
        result = await kernels.cell(sb, escape, timeout=1.0)
        assert result.status is CellStatus.TIMEOUT and result.state_lost, result
        assert (await kernels.cell(sb, "'kept' in dir()")).value == "False"
        assert leftovers_of_kernel(backend, sb) == {}
    finally:
        await sb.close()
