"""Programs that attack sandboxkit's own machinery (issue 20), each a permanent regression test.

The hostile tests (``test_subprocess_hostile``) show that bombs, floods and escapes are contained.
These go further: the program knows how sandboxkit works and aims at the fork server, the files
the host opens, state that survives ``reset``, and memory other runs left behind. In RL a
successful attack is reward hacking: one rollout that hijacks its sandbox would get every later
rollout in that sandbox scored as passing.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator

import anyio
import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._isolation import probe
from sandboxkit.errors import InvalidRequest, SandboxCrashed
from sandboxkit.judge import grade
from sandboxkit.models import Limits, RunRequest, Status
from sandboxkit.pool import SandboxPool
from support.marks import requires
from support.subprocess_sandboxes import RecordingBackend

ISO = probe()
LIMITS = Limits(timeout_s=5.0, memory_mb=256, pids=64, output_bytes=64 * 1024)


needs_root = requires(ISO.is_root, "needs root (reads the fork server's memory from the host)")
needs_bwrap = requires(ISO.bwrap is not None, "needs a working bubblewrap")
needs_memory_cgroup = requires(ISO.cgroup.memory_parent is not None, "needs a writable memory cgroup")


def _req(code: str, **kw: object) -> RunRequest:
    kw.setdefault("limits", LIMITS)
    return RunRequest(code=code, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# 1. The fork server cannot be made to import a module the program planted.

#: A module that, imported by the fork server, makes every later command "exit 0" and leaves a mark.
PLANTED = """
import os
_real_waitpid = os.waitpid
def _always_zero(pid, options):
    got, _ = _real_waitpid(pid, options)
    return got, 0
os.waitpid = _always_zero
open('HIJACKED', 'w').write('the fork server imported a planted module')
"""
SHADOWED = ("ctypes", "signal", "resource", "traceback", "select", "marshal", "atexit", "json")
WRONG = "```python\nprint(3)\nimport sys\nsys.exit(1)\n```"  # prints the right answer, then fails


async def test_a_planted_module_never_runs_in_the_fork_server(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=LIMITS) as pool:
        async with pool.session() as session:
            await session.write_files({f"{name}.py": PLANTED for name in SHADOWED})
            # (no import of a planted name here: a program importing its own module is legitimate)
            killed = await session.run("import os\nos.kill(os.getppid(), 9)")
            assert killed.status is not Status.OK, killed
            workspace = backend.opened[-1].workspace.path
            try:  # the next turn: today this started a fresh server that imported the planted modules
                after = await session.run("import sys\nsys.exit(3)")
            except SandboxCrashed:
                pass  # the sandbox whose server died is discarded
            else:
                assert (after.status, after.exit_code) == (Status.FAILED, 3), after
            assert not os.path.exists(os.path.join(workspace, "HIJACKED")), "a planted module ran in the fork server"
        # Unrelated work on the same pool afterwards is scored on its own merits.
        wrong = await pool.run("print(3)\nraise SystemExit(1)", limits=LIMITS)
        assert (wrong.status, wrong.exit_code) == (Status.FAILED, 1), wrong
        verdict = await grade(pool, WRONG, [{"stdin": "1 2\n", "expected_stdout": "3\n"}] * 3)
        assert verdict.reward == 0.0, verdict


async def test_the_fork_server_imports_nothing_from_the_workspace(sandbox: SubprocessSandbox) -> None:
    # Planted before the server even starts: the first command starts it inside this workspace.
    await sandbox.write_files({f"{name}.py": PLANTED for name in SHADOWED})
    result = await sandbox.run(_req("import sys\nsys.exit(5)"))
    assert (result.status, result.exit_code) == (Status.FAILED, 5), result
    assert not os.path.exists(os.path.join(sandbox.workspace.path, "HIJACKED"))


async def test_a_program_still_imports_its_own_module_named_like_a_preloaded_one(sandbox: SubprocessSandbox) -> None:
    # ``json`` is preloaded in the server; a workspace ``json.py`` must win, as with ``python3 main.py``.
    files = {"json.py": "def dumps(x):\n    return 'mine'\n"}
    result = await sandbox.run(_req("import json\nprint(json.dumps(1))", files=files))
    assert result.stdout == "mine\n", result


async def test_preloaded_modules_are_in_the_warm_interpreter(sandbox: SubprocessSandbox) -> None:
    code = "import sys\nprint(all(m in sys.modules for m in ('json', 're', 'collections', 'itertools', 'typing')))"
    result = await sandbox.run(_req(code))
    assert result.stdout == "True\n", result


# ---------------------------------------------------------------------------------------------
# 2. Host file operations on the workspace never block.


class _Unblocker:
    """After ``after_s``, open every FIFO in ``paths`` for reading so a blocked writer goes on.

    Without it a regression would hang the test run forever instead of failing it.
    """

    def __init__(self, paths: list[str], after_s: float = 10.0) -> None:
        self.paths = paths
        self.fired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(after_s,), daemon=True)
        self._thread.start()

    def _run(self, after_s: float) -> None:
        if self._done.wait(after_s):
            return
        self.fired = True
        for path in self.paths:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            threading.Timer(5.0, os.close, args=(fd,)).start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


async def test_a_fifo_in_place_of_a_file_does_not_freeze_the_host(sandbox: SubprocessSandbox) -> None:
    plant = "import os\nos.remove('main.py')\nfor name in ('main.py', 'data.txt', 'd'):\n    os.mkfifo(name)\n"
    assert (await sandbox.run(_req(plant))).status is Status.OK
    ws = sandbox.workspace.path
    guard = _Unblocker([os.path.join(ws, name) for name in ("main.py", "data.txt", "d")])
    try:
        with anyio.fail_after(30):
            result = await sandbox.run(
                _req(
                    "print(open('data.txt').read(), open('d/x.txt').read())", files={"data.txt": b"A", "d/x.txt": b"B"}
                )
            )
            await sandbox.write_files({"data.txt": "again"})
    finally:
        guard.stop()
    assert not guard.fired, "writing a workspace file blocked on a FIFO the program planted"
    assert result.stdout == "A B\n", result
    assert await sandbox.read_files(["data.txt"]) == {"data.txt": b"again"}


# ---------------------------------------------------------------------------------------------
# 3 + 4. State and memory left by one run never reach the next unrelated run.

LEAVE_STATE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
open('/tmp/answers', 'w').write('42')
open('/dev/shm/answers', 'w').write('42')
libc.shmget(0x5EED, 4096, 0o1666)  # IPC_CREAT | 0666
libc.msgget(0x5EED, 0o1666)
libc.semget(0x5EED, 1, 0o1666)
libc.mq_open(b'/answers', os.O_CREAT | os.O_RDWR, 0o600, None)
libc.syscall(248, b'user', b'answers', b'42', 2, -4)  # add_key to the user keyring
print('left state')
"""
FIND_STATE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
found = [p for p in ('/tmp/answers', '/dev/shm/answers') if os.path.exists(p)]
for name, ok in (
    ('sysv shm', libc.shmget(0x5EED, 0, 0) != -1),
    ('sysv msg', libc.msgget(0x5EED, 0) != -1),
    ('sysv sem', libc.semget(0x5EED, 0, 0) != -1),
    ('mqueue', libc.mq_open(b'/answers', os.O_RDONLY) != -1),
    ('keyring', libc.syscall(250, 10, -4, b'user', b'answers', 0) > 0),  # KEYCTL_SEARCH
):
    if ok:
        found.append(name)
print(found)
"""


@needs_bwrap
async def test_state_does_not_cross_into_the_next_pooled_run(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=LIMITS) as pool:
        left = await pool.run(LEAVE_STATE)
        assert left.stdout == "left state\n", left
        later = await pool.run(FIND_STATE)
        assert later.stdout == "[]\n", later
        assert len(backend.opened) == 1, "the test must reuse the same warm sandbox"


@needs_bwrap
async def test_state_left_earlier_in_a_session_does_not_cross_its_end(backend: RecordingBackend) -> None:
    """Each command of a session reads the server's state report on the one before it (ahead of
    its own exit); state left earlier in the session must still be wiped for the next tenant."""
    async with SandboxPool(backend, max_concurrency=1, limits=LIMITS) as pool:
        async with pool.session() as session:
            assert (await session.run(LEAVE_STATE)).stdout == "left state\n"
            assert (await session.run("print('clean')")).stdout == "clean\n"
        later = await pool.run(FIND_STATE)
        assert later.stdout == "[]\n", later
        assert len(backend.opened) == 1, "the test must reuse the same warm sandbox"


@needs_bwrap
async def test_state_persists_within_a_session(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=LIMITS) as pool, pool.session() as session:
        await session.run("open('/tmp/notes', 'w').write('kept')")
        result = await session.run("print(open('/tmp/notes').read())")
        assert result.stdout == "kept\n", result


FILL_SHM = "for i in range(6):\n    open(f'/dev/shm/ballast{i}', 'wb').write(b'x' * (30 << 20))\nprint('filled')"
ALLOCATE = "block = bytearray(150 << 20)\nprint('allocated')"


@needs_bwrap
@needs_memory_cgroup
async def test_files_left_in_shared_memory_do_not_poison_later_runs(backend: RecordingBackend) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=LIMITS) as pool:
        assert (await pool.run(FILL_SHM)).stdout == "filled\n"
        for _ in range(2):
            later = await pool.run(ALLOCATE)
            assert (later.status, later.stdout) == (Status.OK, "allocated\n"), later
        assert len(backend.opened) == 1


@needs_bwrap
@needs_memory_cgroup
async def test_every_command_runs_inside_the_sandboxs_cgroups(sandbox: SubprocessSandbox) -> None:
    """The host moves the fork server into the sandbox's cgroups after it starts: a command's
    process made before that would escape the memory and pids limits (checked for the first
    command, a later one, and the first after a restart)."""
    assert sandbox.cgroup is not None and sandbox.cgroup.memory_dir is not None
    name = os.path.basename(sandbox.cgroup.memory_dir)
    wanted = ("memory", "pids") if ISO.cgroup.version == 1 else ("",)
    show = "print(open('/proc/self/cgroup').read())"
    for code in (show, show, "open('/tmp/left', 'w').close()", "reset", show):
        if code == "reset":
            assert await sandbox.reset()  # state in /tmp: the server restarts
            continue
        result = await sandbox.run(_req(code))
        assert result.status is Status.OK, result
        lines = [line.split(":", 2) for line in result.stdout.splitlines() if line.count(":") >= 2]
        ours = [path for _, controller, path in lines if controller in wanted]
        if code == show:
            assert len(ours) == len(wanted) and all(path.endswith(name) for path in ours), result.stdout


@needs_bwrap
@needs_memory_cgroup
async def test_lowering_memory_below_what_a_session_holds_is_a_clear_error(sandbox: SubprocessSandbox) -> None:
    assert (await sandbox.run(_req(FILL_SHM))).stdout == "filled\n"
    try:
        result = await sandbox.run(_req("print(1)", limits=LIMITS.merged(memory_mb=32)))
    except InvalidRequest as exc:  # the caller asked for less than the session holds: its mistake, said clearly
        assert "memory_mb=32" in str(exc) and "/dev/shm" in str(exc), exc
    else:
        assert result.status is Status.MEMORY_EXCEEDED, result


# ---------------------------------------------------------------------------------------------
# 5. One run's environment and arguments are not in a later run's memory.

# Reads its own writable memory with ctypes (a forked child is not dumpable, so /proc/self/mem is closed).
SCAN_MEMORY = r"""
import ctypes, re
pattern = re.compile(rb'LEAKMARK[0-9a-f]{64}')
regions = []
with open('/proc/self/maps') as maps:
    for line in maps:
        fields = line.split()
        if fields[1].startswith('rw') and not (len(fields) > 5 and fields[5].startswith('[v')):
            regions.append(tuple(int(x, 16) for x in fields[0].split('-')))
hits = set()
for start, end in regions:
    hits.update(m.group() for m in pattern.finditer(ctypes.string_at(start, end - start)))
print(len(hits))
"""


def _server_memory_hits(sandbox: SubprocessSandbox, pattern: bytes) -> int:
    """Occurrences of ``pattern`` in the fork server's writable memory, read from the host (root)."""
    server = sandbox._server
    assert server is not None and server.server_pid is not None
    hits = 0
    with open(f"/proc/{server.server_pid}/maps") as maps, open(f"/proc/{server.server_pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5].startswith("[v")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                hits += len(re.findall(pattern, mem.read(end - start)))
            except OSError:
                continue
    return hits


@needs_root
async def test_earlier_runs_env_and_argv_are_not_in_later_runs_memory(sandbox: SubprocessSandbox) -> None:
    # Every later run is a fork of the server: what its heap holds, every later run can read.
    secret = "LEAKMARK" + secrets.token_hex(32)
    env = {"API_TOKEN": secret * 160, "OTHER": secret}
    first = await sandbox.run(_req("import os\nprint(len(os.environ['API_TOKEN']))", env=env, argv=[secret * 8]))
    assert first.status is Status.OK, first
    assert _server_memory_hits(sandbox, rb"LEAKMARK[0-9a-f]{64}") == 0, "the earlier run's env is in the server's heap"
    scan = await sandbox.run(_req(SCAN_MEMORY))
    assert scan.stdout == "0\n", f"a later run found the earlier run's secret in its memory: {scan}"


# ---------------------------------------------------------------------------------------------
# 6. Sockets, bad input, /sys, seccomp.


@pytest.fixture
def host_unix_socket() -> Iterator[str]:
    """A world-connectable Unix socket in a host directory that sandboxes see (read-only)."""
    directory = tempfile.mkdtemp(prefix="sandboxkit-sock-", dir="/var/tmp")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "service.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(8)
    server.setblocking(False)
    try:
        yield path
    finally:
        server.close()
        shutil.rmtree(directory)


@needs_bwrap
async def test_host_unix_sockets_are_unreachable_without_network(
    sandbox: SubprocessSandbox, host_unix_socket: str
) -> None:
    code = f"""
import socket
try:
    socket.socket(socket.AF_UNIX).connect({host_unix_socket!r})
    print('connected')
except OSError as exc:
    print('refused', type(exc).__name__)
"""
    result = await sandbox.run(_req(code))
    assert result.stdout.startswith("refused"), result
    # Within the sandbox, socketpair (asyncio's self-pipe, multiprocessing) keeps working.
    pair = await sandbox.run(_req("import asyncio\nasync def f():\n    return 7\nprint(asyncio.run(f()))"))
    assert pair.stdout == "7\n", pair


@pytest.mark.parametrize(
    ("what", "call"),
    [
        ("long name", lambda sb: sb.write_files({"x" * 300: "data"})),
        ("long dir", lambda sb: sb.write_files({"d" * 256 + "/a.txt": "data"})),
        ("surrogate path", lambda sb: sb.write_files({"bad\udc80.txt": "data"})),
        ("surrogate content", lambda sb: sb.write_files({"a.txt": "bad\ud800"})),
        ("surrogate code", lambda sb: sb.run(_req("print('\ud800')"))),
        ("surrogate stdin", lambda sb: sb.run(_req("print(1)", stdin="\udc80"))),
        ("surrogate env", lambda sb: sb.run(_req("print(1)", env={"A": "\udc80"}))),
        ("surrogate argv", lambda sb: sb.exec(["echo", "\udc80"])),
        ("surrogate command", lambda sb: sb.exec("echo \udc80")),
        ("long read", lambda sb: sb.read_files(["y" * 300])),
        ("huge memory", lambda sb: sb.run(_req("print(1)", limits=LIMITS.merged(memory_mb=1 << 50)))),
        ("huge pids", lambda sb: sb.run(_req("print(1)", limits=LIMITS.merged(pids=1 << 62)))),
        ("huge file size", lambda sb: sb.run(_req("print(1)", limits=LIMITS.merged(file_size_mb=1 << 50)))),
    ],
)
async def test_bad_input_is_an_invalid_request(sandbox: SubprocessSandbox, what: str, call: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        await call(sandbox)  # type: ignore[operator]
    assert "subprocess" in str(info.value), info.value
    # ... and the sandbox still serves.
    assert (await sandbox.run(_req("print('ok')"))).stdout == "ok\n"


@needs_bwrap
async def test_sibling_sandboxes_are_invisible_in_sys(backend: RecordingBackend) -> None:
    sibling = await backend.open(LIMITS)
    me = await backend.open(LIMITS)
    try:
        await sibling.run(_req("pass"))
        code = "import os\nhits = []\nfor root, dirs, files in os.walk('/sys/fs/cgroup'):\n"
        code += "    hits += [d for d in dirs if 'sandboxkit' in d]\nprint(hits)"
        result = await me.run(_req(code))
        assert result.stdout == "[]\n", result
    finally:
        await sibling.close()
        await me.close()


@needs_bwrap
@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("io_uring_setup", "libc.syscall(425, 8, ctypes.create_string_buffer(120))"),
        ("add_key", "libc.syscall(248, b'user', b'k', b'v', 1, -4)"),
        ("keyctl", "libc.syscall(250, 0, -4, 0)"),
        ("bpf", "libc.syscall(321, 0, ctypes.create_string_buffer(128), 128)"),
        ("userfaultfd", "libc.syscall(323, 0)"),
        ("perf_event_open", "libc.syscall(298, ctypes.create_string_buffer(128), 0, -1, -1, 0)"),
    ],
)
async def test_dangerous_syscalls_are_refused(sandbox: SubprocessSandbox, name: str, call: str) -> None:
    code = f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = {call}\nprint(rc, ctypes.get_errno())"
    result = await sandbox.run(_req(code))
    assert result.stdout == f"-1 {errno.EPERM}\n", f"{name}: {result}"


async def test_hash_seed_is_per_sandbox_and_a_requested_seed_is_honoured(backend: RecordingBackend) -> None:
    # Decision (see docs/security.md): forked runs of one sandbox share its server's random hash
    # seed; unrelated sandboxes differ; a run that sets PYTHONHASHSEED starts cold and gets it.
    code = "print(hash('sandboxkit'))"
    a, b = await backend.open(LIMITS), await backend.open(LIMITS)
    try:
        first, second = (await a.run(_req(code))).stdout, (await b.run(_req(code))).stdout
        assert first != second
        seeded = [(await sb.run(_req(code, env={"PYTHONHASHSEED": "1"}))).stdout for sb in (a, b)]
        assert seeded[0] == seeded[1]
    finally:
        await a.close()
        await b.close()


# ---------------------------------------------------------------------------------------------
# 7. Tracebacks show the user's frames only.

TRACEBACK_CASES = {
    "syntax error": ("def f(:\n    pass\n", {}, "SyntaxError"),
    "runtime error": ("def f():\n    1 / 0\nf()\n", {}, "ZeroDivisionError"),
    "imported module": (
        "import helper\nhelper.g()\n",
        {"helper.py": "def g():\n    raise KeyError('x')\n"},
        "KeyError",
    ),
    "syntax in import": ("import helper2\n", {"helper2.py": "x = (\n"}, "SyntaxError"),
    "chained": ("try:\n    1 / 0\nexcept Exception:\n    raise ValueError('v')\n", {}, "ValueError: v"),
    "keyboard interrupt": ("raise KeyboardInterrupt\n", {}, "KeyboardInterrupt"),
    "system exit": ("raise SystemExit('bye')\n", {}, "bye"),
    "exit in atexit": ("import atexit, sys\natexit.register(lambda: sys.exit(3))\n", {}, "SystemExit: 3"),
}
INTERNAL = ("<string>", "_run_python", "_server_main", "_child", "_serve_one", "sandboxkit")


@pytest.mark.parametrize("case", list(TRACEBACK_CASES))
async def test_tracebacks_show_only_the_users_frames(sandbox: SubprocessSandbox, case: str) -> None:
    code, files, expected = TRACEBACK_CASES[case]
    result = await sandbox.run(_req(code, files=files))
    assert expected in result.stderr, result
    for word in INTERNAL:
        assert word not in result.stderr, f"{case}: traceback names {word!r}:\n{result.stderr}"
    if "Traceback" in result.stderr and case not in ("exit in atexit",):
        assert 'main.py", line ' in result.stderr, result.stderr
