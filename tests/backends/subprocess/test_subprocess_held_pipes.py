"""A fork server's held output pipes (issue 30: host CPU per run).

Where the sweep after each command reaches every process (a PID namespace of its own, no network),
the server keeps one stdout/stderr pair for its whole life instead of a new pair per command. The
pipes then outlive a command, which makes them an attack surface between tenants: a program may
change their flags or size, leave a writer behind, or write into them between commands. Each
test here is such an attack, or a count that failed before the change.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._forkserver import SERVER_SOURCE
from sandboxkit.errors import SandboxCrashed
from sandboxkit.models import Limits, RunRequest, Status
from sandboxkit.pool import SandboxPool
from support.marks import requires
from support.subprocess_sandboxes import FAST, RecordingBackend

pytestmark = requires(RecordingBackend().isolation.bwrap is not None, "held pipes need bubblewrap")


async def _held(sandbox: SubprocessSandbox) -> tuple[int, int]:
    await sandbox.run(RunRequest(code="pass"))
    server = sandbox._server
    assert server is not None
    held = server._held
    assert held is not None, "a sandbox with its own PID namespace and no network holds its output pipes"
    return held


async def test_the_pipes_are_held_only_without_network(sandbox: SubprocessSandbox) -> None:
    first = await _held(sandbox)
    assert await _held(sandbox) == first, "the same pair serves the next command"
    result = await sandbox.run(RunRequest(code="print(1)", limits=FAST.merged(network=True)))
    assert result.stdout == "1\n"
    server = sandbox._server
    assert server is not None and server._held is None, "with the network, a process outside could hold one"


async def test_flags_and_size_a_program_sets_on_its_stdout_do_not_reach_the_next_command(
    sandbox: SubprocessSandbox,
) -> None:
    await _held(sandbox)
    spoil = (  # its own output first: one page in packet mode, non-blocking, would refuse its second write
        "import fcntl, os\n"
        "print('spoiled')\n"
        "for fd in (1, 2):\n"
        "    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK | os.O_DIRECT | os.O_APPEND)\n"
        "    fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ: one page\n"
    )
    assert (await sandbox.run(RunRequest(code=spoil))).stdout == "spoiled\n"
    check = (
        "import fcntl, os, sys\n"
        "print(fcntl.fcntl(1, fcntl.F_GETFL), fcntl.fcntl(2, fcntl.F_GETFL), fcntl.fcntl(1, 1032))\n"
        "sys.stdout.write('o' * 300_000)\n"
        "sys.stderr.write('e' * 200_000)\n"
    )
    result = await sandbox.run(RunRequest(code=check, limits=FAST.merged(output_bytes=1 << 20)))
    assert result.status is Status.OK, result.stderr[-300:]
    flags, _, rest = result.stdout.partition("\n")
    assert flags.split() == [str(os.O_WRONLY), str(os.O_WRONLY), "65536"]
    assert rest == "o" * 300_000
    assert result.stderr == "e" * 200_000


async def test_a_writer_left_behind_never_reaches_the_next_command(sandbox: SubprocessSandbox) -> None:
    await _held(sandbox)
    leave = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            os.write(1, b'LEFTOVER\\n')\n"
        "            time.sleep(0.001)\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"
        "print('done')\n"
    )
    first = await sandbox.run(RunRequest(code=leave))
    assert first.status is Status.OK
    assert first.stdout.endswith("done\n") or "done\n" in first.stdout
    for i in range(5):
        result = await sandbox.run(RunRequest(code=f"import time\ntime.sleep(0.02)\nprint({i})"))
        assert result.stdout == f"{i}\n", "a process of an earlier command wrote into this one's output"


async def test_consecutive_commands_get_exactly_their_own_output(sandbox: SubprocessSandbox) -> None:
    await _held(sandbox)
    for i in range(20):
        size = (i * 37_337) % 150_000
        code = f"import sys\nsys.stdout.write('{i % 10}' * {size})\nsys.stderr.write('err{i}')"
        result = await sandbox.run(RunRequest(code=code, limits=FAST.merged(output_bytes=1 << 20)))
        assert result.stdout == str(i % 10) * size
        assert result.stderr == f"err{i}"


async def test_a_timed_out_command_keeps_what_it_printed_and_the_sandbox_goes_on(sandbox: SubprocessSandbox) -> None:
    await _held(sandbox)
    result = await sandbox.run(
        RunRequest(code="import time\nprint('before', flush=True)\ntime.sleep(30)", limits=FAST.merged(timeout_s=0.5))
    )
    assert result.status is Status.TIMEOUT
    assert result.stdout == "before\n"
    assert (await sandbox.run(RunRequest(code="print('after')"))).stdout == "after\n"


def _write_end_in(pid: int, read_fd: int) -> str:
    """The ``/proc`` path of ``pid``'s descriptor on the pipe whose read end is ``read_fd`` here."""
    inode = os.fstat(read_fd).st_ino
    for name in os.listdir(f"/proc/{pid}/fd"):
        link = os.readlink(f"/proc/{pid}/fd/{name}")
        if re.fullmatch(rf"pipe:\[{inode}\]", link):
            return f"/proc/{pid}/fd/{name}"
    raise AssertionError(f"process {pid} holds no end of pipe {inode}")


def _forge(sandbox: SubprocessSandbox, held: tuple[int, int]) -> None:
    """Write into the server's held stdout from outside, as a process that escaped the sweep could.

    Root on the host reaches the server's write end through ``/proc``.
    """
    server = sandbox._server
    assert server is not None and server.server_pid is not None
    fd = os.open(_write_end_in(server.server_pid, held[0]), os.O_WRONLY)
    try:
        os.write(fd, b"forged output\n")
    finally:
        os.close(fd)


async def test_output_with_no_command_running_ends_the_sandbox(sandbox: SubprocessSandbox) -> None:
    _forge(sandbox, await _held(sandbox))
    # No loop round in between: the command itself finds the bytes before it sends anything.
    with pytest.raises(SandboxCrashed):
        await sandbox.run(RunRequest(code="print('mine')"))
    assert not await sandbox.alive()


async def test_a_pool_runs_the_call_elsewhere_when_a_sandbox_s_pipes_were_written_between_tenants(
    pool: SandboxPool, backend: RecordingBackend
) -> None:
    assert (await pool.run("print(1)")).stdout == "1\n"  # a tenant came and went: the sandbox was reset
    (sandbox,) = backend.opened
    assert sandbox._server is not None and sandbox._server._held is not None
    _forge(sandbox, sandbox._server._held)
    result = await pool.run("print('mine')")
    assert result.stdout == "mine\n"
    assert len(backend.opened) == 2 and not await sandbox.alive()


async def test_a_warm_pooled_run_makes_one_pipe(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    await pool.run("print(1)")
    made = 0
    real = os.pipe2

    def counting(flags: int) -> tuple[int, int]:
        nonlocal made
        made += 1
        return real(flags)

    monkeypatch.setattr(os, "pipe2", counting)
    runs = 5
    for _ in range(runs):
        assert (await pool.run("print(1)")).stdout == "1\n"
    assert made == runs, f"{made / runs:.1f} pipes per run (stdin only; the output pair is held)"


async def test_a_sandbox_without_bwrap_still_gets_a_pair_per_command() -> None:
    backend = RecordingBackend().without_bwrap()
    try:
        async with SandboxPool(backend, max_concurrency=1, limits=Limits(timeout_s=10)) as pool:
            result = await pool.run("import sys\nprint('o')\nprint('e', file=sys.stderr)")
            assert (result.stdout, result.stderr) == ("o\n", "e\n")
            (sandbox,) = backend.opened
            assert sandbox._server is None or sandbox._server._held is None
    finally:
        await backend.aclose()


@pytest.mark.parametrize("libc_call", [True, False])
def test_the_child_makes_held_pipes_blocking_with_or_without_its_libc_call(tmp_path: Path, libc_call: bool) -> None:
    """The child clears the held pipes' flags with libc's ``fcntl`` (one call per pipe); an image's
    ``python3`` without ctypes has none, and must still give the program blocking streams."""
    server = tmp_path / "server.py"
    server.write_text(SERVER_SOURCE)
    out = tmp_path / "flags"
    probe = f"""
import fcntl, os, sys
sys.argv = ["server", "-1"]
ns = {{"__name__": "server_under_test"}}
exec(compile(open({str(server)!r}).read(), "server", "exec"), ns)
if not {libc_call!r}:
    ns["_LIBC_FUNCTIONS"]["fcntl"] = None
for target in (1, 2):
    r, w = os.pipe2(os.O_NONBLOCK)
    fcntl.fcntl(w, fcntl.F_SETFL, os.O_NONBLOCK | os.O_APPEND)
    os.dup2(w, target)
ns["_reset_held"]()
with open({str(out)!r}, "w") as f:
    f.write(" ".join(str(fcntl.fcntl(fd, fcntl.F_GETFL) & (os.O_NONBLOCK | os.O_APPEND)) for fd in (1, 2)))
"""
    subprocess.run([sys.executable, "-I", "-c", probe], check=True, timeout=30)
    flags = [int(x) for x in out.read_text().split()]
    assert all(f & os.O_NONBLOCK == 0 for f in flags), "the program would get a non-blocking stdout"
    if libc_call:
        assert flags == [0, 0], "every flag an earlier program set is cleared"
