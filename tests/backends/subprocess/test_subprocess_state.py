"""State: what persists inside one sandbox, and what never crosses from one run to the next.

Files persist across ``run``/``exec`` in one sandbox (multi-turn tools rely on it); interpreter
state never does, because every warm Python run is a fresh fork of a server that never runs
user code; processes never outlive the command that started them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._forkserver import ServerStale
from sandboxkit.backends.subprocess._isolation import INNER_UID
from sandboxkit.backends.subprocess._output import OutputLimits
from sandboxkit.errors import SandboxLost
from sandboxkit.models import RunRequest, Status
from sandboxkit.pool import SandboxPool
from support.marks import missing
from support.subprocess_sandboxes import FAST, RecordingBackend, processes_of, settled


def _req(code: str, **kw: object) -> RunRequest:
    return RunRequest(code=code, limits=FAST, **kw)  # type: ignore[arg-type]


async def test_files_persist_across_run_and_exec(sandbox: SubprocessSandbox) -> None:
    wrote = await sandbox.run(_req("import os; os.makedirs('d', exist_ok=True); open('d/a.txt', 'w').write('one')"))
    assert wrote.status is Status.OK, wrote
    appended = await sandbox.exec("cat d/a.txt && echo -n two >> d/a.txt")
    assert appended.stdout == "one"
    in_subdir = await sandbox.exec("ls", cwd="d")
    assert in_subdir.stdout == "a.txt\n"
    read = await sandbox.run(_req("print(open('d/a.txt').read())"))
    assert read.stdout == "onetwo\n"
    assert await sandbox.read_files(["d/a.txt"]) == {"d/a.txt": b"onetwo"}


async def test_files_written_by_host_are_the_programs(sandbox: SubprocessSandbox) -> None:
    await sandbox.write_files({"data/in.txt": "host"})
    result = await sandbox.exec("echo more >> data/in.txt && mkdir data/sub && rm data/in.txt && ls data")
    assert result.status is Status.OK, result
    assert result.stdout == "sub\n"


async def test_warm_runs_share_no_interpreter_state(sandbox: SubprocessSandbox) -> None:
    first = await sandbox.run(
        _req("import sys, json, builtins\nsys.modules['json'] = None\nbuiltins.LEAK = 1\nsys.path.append('/leak')")
    )
    assert first.status is Status.OK, first
    second = await sandbox.run(
        _req("import sys, builtins\nimport json\nprint(hasattr(builtins, 'LEAK'), '/leak' in sys.path, json.dumps(1))")
    )
    assert second.stdout == "False False 1\n", second


async def test_warm_runs_behave_like_a_fresh_interpreter(sandbox: SubprocessSandbox) -> None:
    code = """
import os, random, sys, threading
def late():
    print('thread finished')
threading.Timer(0.05, late).start()
import atexit
atexit.register(lambda: print('atexit ran'))
print(__name__, os.path.basename(__file__), sys.argv[1:], os.getcwd() == os.environ['HOME'])
print(random.random())
"""
    first = await sandbox.run(_req(code, argv=["x", "y"]))
    second = await sandbox.run(_req(code, argv=["x", "y"]))
    assert first.status is Status.OK, first
    lines = first.stdout.splitlines()
    assert lines[0] == "__main__ main.py ['x', 'y'] True"
    assert lines[2:] == ["thread finished", "atexit ran"]
    assert first.stdout.splitlines()[1] != second.stdout.splitlines()[1], "random state leaked between runs"


async def test_warm_exit_codes_and_tracebacks(sandbox: SubprocessSandbox) -> None:
    assert (await sandbox.run(_req("import sys; sys.exit(7)"))).exit_code == 7
    assert (await sandbox.run(_req("raise SystemExit('bye')"))).stderr == "bye\n"
    error = await sandbox.run(_req("def f():\n    1 / 0\nf()"))
    assert error.exit_code == 1
    assert error.stderr.startswith("Traceback (most recent call last):\n")
    assert "_server_main" not in error.stderr and "ZeroDivisionError" in error.stderr
    syntax = await sandbox.run(_req("def ("))
    assert syntax.status is Status.FAILED and "SyntaxError" in syntax.stderr


async def test_python_env_options_use_the_cold_path(sandbox: SubprocessSandbox) -> None:
    code = "import sys; print(sys.flags.dont_write_bytecode)"
    cold = await sandbox.run(_req(code, env={"PYTHONDONTWRITEBYTECODE": "1"}))
    assert cold.stdout == "1\n", cold


async def test_program_identity(sandbox: SubprocessSandbox, backend: RecordingBackend) -> None:
    result = await sandbox.exec(["python3", "-c", "import os; print(os.getuid(), os.getcwd())"])
    uid, cwd = result.stdout.split()
    assert cwd == sandbox.inner_path  # /work under bubblewrap: the host layout stays hidden
    if backend.isolation.bwrap is not None:
        assert int(uid) == INNER_UID
    elif backend.isolation.is_root:
        assert int(uid) == sandbox.uid
    assert int(uid) != 0 or os.geteuid() != 0, "the program must never run as root"


async def test_no_process_survives_a_command(sandbox: SubprocessSandbox, backend: RecordingBackend) -> None:
    from support.subprocess_sandboxes import leftovers

    result = await sandbox.exec("sleep 60 & disown; nohup sleep 60 >/dev/null 2>&1 & echo started")
    assert result.stdout == "started\n"
    assert leftovers(backend) == {}


async def test_reset_and_reuse_through_the_pool(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
        await pool.run("open('left.txt', 'w').write('x')")
        result = await pool.run("import os; print(os.listdir('.'))")
        assert result.stdout == "['main.py']\n"
        assert len(backend.opened) == 1, "the pool should reuse its one warm sandbox"
        async with pool.session() as session:
            await session.run("open('kept.txt', 'w').write('y')")
            kept = await session.exec("cat kept.txt")
            assert kept.stdout == "y"


async def test_without_python_in_the_sandbox_commands_run_cold_but_confined() -> None:
    # A sandbox PATH with no python3: no fork server, each command starts its own bwrap.
    # (Outside /tmp, which the sandbox sees as its own private tmpfs.)
    top = tempfile.mkdtemp(prefix="sandboxkit-nopython-", dir="/var/tmp")
    os.chmod(top, 0o755)
    bin_dir = os.path.join(top, "bin")
    os.makedirs(bin_dir)
    for tool in ("bash", "cat", "id", "ls", "sleep"):
        os.symlink(f"/usr/bin/{tool}", os.path.join(bin_dir, tool))
    backend = RecordingBackend(path=bin_dir)
    try:
        assert backend.server_python is None
        assert any("fork server" in m for m in backend.capabilities.missing_protections)
        assert "python" not in backend.capabilities.languages
        sb = await backend.open(FAST)
        await sb.write_files({"sub/f.txt": "cold"})
        result = await sb.exec("cat f.txt; echo; id -u", cwd="sub")
        assert result.status is Status.OK, result
        text, uid = result.stdout.split()
        assert text == "cold"
        assert int(uid) != 0 or os.geteuid() != 0
        slow = await sb.exec("sleep 30", timeout=0.5)
        assert slow.status is Status.TIMEOUT
    finally:
        await backend.aclose()
        shutil.rmtree(top)


async def test_host_never_follows_symlinks_the_program_planted(sandbox: SubprocessSandbox) -> None:
    from sandboxkit.errors import InvalidRequest

    with open("/etc/hostname", "rb") as f:
        hostname = f.read()
    planted = await sandbox.exec("ln -s /etc escape && ln -s /etc/hostname top.txt && echo ok")
    assert planted.stdout == "ok\n", planted
    assert await sandbox.read_files(["top.txt"]) == {}  # O_NOFOLLOW: not the host's /etc/hostname
    for bad in ("escape/hostname",):
        try:
            got = await sandbox.read_files([bad])
        except InvalidRequest:
            got = {}
        assert got == {}
    try:
        await sandbox.write_files({"escape/pwned": "x"})
    except InvalidRequest:
        pass
    assert not os.path.exists("/etc/pwned")
    await sandbox.write_files({"top.txt": "replaced"})  # replaces the link itself, not its target
    with open("/etc/hostname", "rb") as f:
        assert f.read() == hostname
    assert await sandbox.read_files(["top.txt"]) == {"top.txt": b"replaced"}


def _kill_server(sb: SubprocessSandbox) -> None:
    """SIGKILL the sandbox's fork server, as something between two tenants might, and wait until it is gone."""
    server = sb._server
    assert server is not None and server.server_pid is not None and server.proc is not None
    os.kill(server.server_pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while server.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)


# Workspace state only: a server whose command left /tmp state is stopped by the reset anyway.
LEAVE = "open('mine.txt', 'w').write('x'); print('left')"
LOOK = "import os; print(os.path.exists('mine.txt'), os.listdir('/tmp'))"


async def test_server_dead_after_reset_is_lost_not_a_failed_run(sandbox: SubprocessSandbox) -> None:
    assert (await sandbox.run(_req(LEAVE))).stdout == "left\n"
    assert await sandbox.reset()  # does not wait for the state report
    _kill_server(sandbox)
    with pytest.raises(SandboxLost):
        await sandbox.run(_req(LOOK))
    assert not await sandbox.alive()


async def test_pooled_run_after_server_died_between_tenants_succeeds(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
        first = await pool.run(LEAVE)
        assert first.stdout == "left\n", first
        [sb] = backend.opened
        _kill_server(sb)  # after the pool's reset: the next tenant's call finds it dead
        second = await pool.run(LOOK)
        assert second.status is Status.OK, second
        assert second.stdout == "False []\n", "state of the previous tenant is visible"
        assert len(backend.opened) == 2, "the dead sandbox was not replaced"
        assert not await sb.alive()
        again = await pool.run(LOOK)  # the replacement is reused as usual
        assert again.stdout == "False []\n" and len(backend.opened) == 2


LEAVE_TMP = "open('/tmp/leak', 'w').write('x'); print('left')"


async def test_next_tenant_never_runs_after_a_late_dirty_report(sandbox: SubprocessSandbox) -> None:
    if not sandbox._iso.bwrap:
        pytest.skip("no private /tmp without bwrap")
    assert (await sandbox.run(_req(LEAVE_TMP))).stdout == "left\n"
    first = sandbox._server
    sandbox._handover = True  # as after a reset that found the server still checking
    look = await sandbox.run(_req(LOOK))
    assert look.stdout == "False []\n", look
    assert sandbox._server is not first, "the dirty server was not replaced"


async def test_fork_server_refuses_a_fresh_command_after_a_dirty_report(sandbox: SubprocessSandbox) -> None:
    if not sandbox._iso.bwrap:
        pytest.skip("no private /tmp without bwrap")
    assert (await sandbox.run(_req(LEAVE_TMP))).stdout == "left\n"
    server = sandbox._server
    assert server is not None
    await server.settle()
    assert server.dirty
    request: dict[str, object] = {"cwd": "/", "env": {}, "rlimits": [], "argv": ["/bin/true"]}
    with pytest.raises(ServerStale):  # the server itself refuses: the host's view is not trusted alone
        await server.run(request, stdin=b"", timeout_s=5.0, output=OutputLimits.of(FAST), fresh=True)
    assert not server.alive


async def test_a_run_cancelled_while_its_server_starts_leaves_no_process(sandbox: SubprocessSandbox) -> None:
    """A caller's timeout may cancel the very first run while bwrap and the server start: both go."""
    if sandbox.uid is None:
        missing("a sandbox uid (root) to find the sandbox's processes")
    uids = {sandbox.uid}
    assert processes_of(uids) == {}
    task = asyncio.create_task(sandbox.run(_req("print('first')")))
    deadline = time.monotonic() + 10
    while not processes_of(uids) and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    assert processes_of(uids), "the server never started"
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert await settled(lambda: processes_of(uids)) == {}, "a half-started server was left running"
    result = await sandbox.run(_req("print('next')"))  # the next run starts a server of its own
    assert result.status is Status.OK and result.stdout == "next\n", result
