"""Programs that attack sandboxkit's own machinery on Docker (issue 20), each a permanent regression test.

The hostile suite (``test_docker_hostile.py``) contains programs that misbehave; these go after
the sandbox itself: state left for the next tenant of a pooled container (IPC objects, memory
charged by them, earlier runs' env and argv in inherited memory), signals aimed at the runner
(PID 1), symlinks planted for the host's file fetch, bad input that must be a clear
``InvalidRequest``, ``cleanup`` removing a live process's sandboxes, and tracebacks that would
show the runner's own frames. Every test ran red on the code before its fix (see the commits).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import RunRequest, RunResult, Status
from sandboxkit.output import cut_head_tail
from sandboxkit.pool import SandboxPool
from support.docker_engine import FAST, containers_of, run_cleanup_cli

ATTACK = FAST.merged(timeout_s=5.0)


@pytest.fixture
async def pool(backend: Any) -> AsyncIterator[SandboxPool]:
    """One container, reset between runs: every run is the next tenant of the one before."""
    async with SandboxPool(backend, max_concurrency=1, max_sandboxes=1, limits=ATTACK) as p:
        yield p


async def same_sandbox(pool: SandboxPool, *runs: tuple[str, dict[str, Any]]) -> list[RunResult]:
    results = [await pool.run(code, **kw) for code, kw in runs]
    assert len({r.sandbox_id for r in results}) == 1, "the pool did not reuse its container: the test is void"
    return results


# ----------------------------------------------------------------------------- state across reset

PLANT_IPC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
shm = libc.shmget(0x5EC7, 1 << 20, IPC_CREAT | 0o666)
msg = libc.msgget(0x5EC8, IPC_CREAT | 0o666)
sem = libc.semget(0x5EC9, 1, IPC_CREAT | 0o666)
fd = os.open('/dev/mqueue/answers', os.O_CREAT | os.O_RDWR, 0o666)
os.close(fd)
open('/dev/shm/answers', 'w').write('42')
open('/tmp/answers', 'w').write('42')
print(shm >= 0, msg >= 0, sem >= 0)
"""
LIST_IPC = """
import os
left = []
for kind in ('shm', 'msg', 'sem'):
    with open('/proc/sysvipc/' + kind) as fh:
        left += [kind + ':' + line.split()[0] for line in fh.readlines()[1:]]
for top in ('/dev/mqueue', '/dev/shm', '/tmp'):
    left += [top + '/' + name for name in os.listdir(top)]
print(left)
"""


async def test_ipc_objects_and_mqueues_do_not_survive_reset(pool: SandboxPool) -> None:
    planted, after = await same_sandbox(pool, (PLANT_IPC, {}), (LIST_IPC, {}))
    assert planted.stdout == "True True True\n", planted
    assert after.stdout == "[]\n", after


SHM_HOG = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = 96 << 20
shm = libc.shmget(0x5ECA, size, 0o1000 | 0o666)
addr = libc.shmat(shm, None, 0)
ctypes.memset(addr, 1, size)  # charged to the container's memory cgroup until the segment is removed
print('planted', shm >= 0)
"""


async def test_shared_memory_is_not_charged_to_later_tenants(backend: Any) -> None:
    limits = ATTACK.merged(memory_mb=128)
    async with SandboxPool(backend, max_concurrency=1, max_sandboxes=1, limits=limits) as pool:
        planted, later = await same_sandbox(
            pool, (SHM_HOG, {}), ("x = b'x' * (96 << 20)\nprint('fits', len(x) >> 20)", {})
        )
    assert planted.stdout == "planted True\n", planted
    assert later.status is Status.OK and later.stdout == "fits 96\n", later


# ----------------------------------------------------------------------------- earlier runs' data in memory

DUMP = (
    "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem, open('dump.bin', 'wb') as out:\n"
    "    for line in maps:\n"
    "        span, perms = line.split()[:2]\n"
    "        start, end = (int(x, 16) for x in span.split('-'))\n"
    "        if perms.startswith('rw') and end - start < (64 << 20):\n"
    "            mem.seek(start)\n            out.write(mem.read(end - start))\n"
)


def _fragments(secret: str) -> list[bytes]:
    """Pieces of ``secret`` to look for: a freed block keeps most of its bytes, not always its start."""
    data = secret.encode()
    return [data[i : i + 12] for i in range(0, len(data) - 12, 97)] + [data[-12:]]


async def _leaked(sandbox: Any, secrets: list[str]) -> list[str]:
    """Which of ``secrets`` a fast-path run finds in the memory it inherits from the runner."""
    if sandbox.runner == "static":
        pytest.skip("no program inherits the static runner's memory (each starts by exec); see test_docker_static.py")
    dumped = await sandbox.run(RunRequest(code=DUMP, fetch_files=["dump.bin"], limits=FAST))
    memory = dumped.files["dump.bin"]
    assert b"in-container runner" in memory  # the dump does hold what the runner had (its source)
    return [s[:8] for s in secrets if any(piece in memory for piece in _fragments(s))]


async def test_earlier_env_and_argv_are_not_in_inherited_memory(sandbox: Any) -> None:
    # The runner zeroes its blob buffers; env and argv travel in the request too and must not
    # stay behind in the runner's heap, which the next fast-path run inherits by fork. Random
    # secrets (so nothing else in memory matches), dumped right after the run that carried them.
    def secret(tag: str, size: int) -> str:
        return tag + os.urandom(size).hex()

    env_short, env_long, argv = secret("ENV5", 16), secret("LONG", 2048), secret("ARG7", 16)
    ran = await sandbox.run(
        RunRequest(
            code="import os, sys\nprint(len(os.environ['TOKEN']) + len(os.environ['BLOB']), len(sys.argv[1]))",
            env={"TOKEN": env_short, "BLOB": env_long},
            argv=[argv],
            limits=FAST,
        )
    )
    assert ran.stdout == f"{len(env_short) + len(env_long)} {len(argv)}\n", ran
    assert await _leaked(sandbox, [env_short, env_long, argv]) == []
    exec_argv, exec_env = secret("EXE9", 16), secret("XENV", 512)
    execd = await sandbox.exec(["true", exec_argv], env={"EXEC_TOKEN": exec_env})
    assert execd.status is Status.OK
    assert await _leaked(sandbox, [exec_argv, exec_env]) == []


# ----------------------------------------------------------------------------- signals to the runner


@pytest.mark.parametrize(
    "sig",
    [
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGALRM,
        signal.SIGSTOP,
        signal.SIGTSTP,
        signal.SIGSEGV,
    ],
)
async def test_the_program_cannot_signal_the_runner(sandbox: Any, sig: signal.Signals) -> None:
    # Refused outright (the runner is root) or delivered and ignored (init handles no signal).
    code = (
        f"import os, time\ntry:\n    os.kill(1, {int(sig)})\nexcept PermissionError:\n    pass\n"
        "time.sleep(0.3)\nprint('still here')"
    )
    result = await sandbox.run(RunRequest(code=code, limits=FAST))
    assert result.status is Status.OK and result.stdout == "still here\n", result
    assert await sandbox.alive()
    again = await sandbox.run(RunRequest(code="print('next run')", limits=FAST))
    assert again.stdout == "next run\n"


async def test_the_program_cannot_change_the_runners_limits_or_priority(sandbox: Any) -> None:
    # Same-uid rules would let a program prlimit (RLIMIT_NOFILE 4: the next run cannot open a
    # pipe; RLIMIT_CPU: the kernel SIGKILLs even init), renice or pin the runner. It runs as root
    # with only the capabilities it needs; the program, uid 1000, has none and cannot touch it.
    code = (
        "import os, resource\n"
        "attacks = {\n"
        "    'nofile': lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (4, 4)),\n"
        "    'cpu': lambda: resource.prlimit(1, resource.RLIMIT_CPU, (1, 1)),\n"
        "    'renice': lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),\n"
        "    'affinity': lambda: os.sched_setaffinity(1, {0}),\n"
        "    'idle': lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)),\n"
        "}\n"
        "for name, attack in attacks.items():\n"
        "    try:\n        attack()\n        print('CHANGED', name)\n"
        "    except OSError:\n        print('refused', name)\n"
    )
    result = await sandbox.run(RunRequest(code=code, limits=FAST))
    assert "CHANGED" not in result.stdout and result.stdout.count("refused") == 5, result
    for _ in range(3):
        again = await sandbox.run(RunRequest(code="print('next run')", limits=FAST))
        assert again.status is Status.OK and again.stdout == "next run\n", again
    assert await sandbox.alive()


async def test_programs_still_get_default_signal_dispositions(sandbox: Any) -> None:
    # The runner ignores what it must; its children must not inherit that (exec'd or in place).
    check = "grep -E '^Sig(Ign|Cgt)' /proc/self/status"
    shell = await sandbox.exec(check)
    assert "SigIgn:\t0000000000000000" in shell.stdout, shell
    runner = await sandbox.exec("grep -E '^SigCgt' /proc/1/status")  # the runner catches no signal at all
    # (the static runner's Go runtime keeps signal 33, its AllThreadsSyscall signal, which only root can send)
    caught = "0000000100000000" if sandbox.runner == "static" else "0000000000000000"
    assert runner.stdout == f"SigCgt:\t{caught}\n", runner
    python = await sandbox.run(
        RunRequest(code="import signal\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    )
    assert python.stdout == "True\n", python
    interrupted = await sandbox.run(RunRequest(code="import os, signal\nos.kill(os.getpid(), signal.SIGINT)"))
    assert interrupted.status is Status.FAILED and "KeyboardInterrupt" in interrupted.stderr, interrupted


# ----------------------------------------------------------------------------- fetching files


async def test_fetch_does_not_follow_planted_symlinks(sandbox: Any) -> None:
    plant = (
        "import os\nos.symlink('/etc', 'etc')\nos.symlink('/proc/1', 'init')\nos.makedirs('deep')\n"
        "os.symlink('/etc/shadow', 'deep/shadow')\nos.symlink('..', 'deep/up')\n"
        "open('mine.txt', 'w').write('mine')\nopen('locked.txt', 'w').write('x')\nos.chmod('locked.txt', 0)\n"
        "os.mkfifo('fifo')\n"
        "print(os.access('etc/shadow', os.R_OK))"
    )
    wanted = ["etc/shadow", "etc/passwd", "init/environ", "deep/shadow", "deep/up/mine.txt", "mine.txt", "fifo"]
    result = await sandbox.run(RunRequest(code=plant, fetch_files=wanted, limits=FAST))
    assert result.stdout == "False\n", result
    assert result.files == {"mine.txt": b"mine"}, sorted(result.files)
    assert await sandbox.read_files(["etc/passwd", "locked.txt", "mine.txt"]) == {"mine.txt": b"mine"}
    await sandbox.exec("chmod 000 .")  # the program locks its own workspace: nothing to fetch, no crash
    assert await sandbox.read_files(["mine.txt"]) == {}
    assert await sandbox.alive()


async def test_write_files_does_not_follow_planted_symlinks(sandbox: Any) -> None:
    await sandbox.exec("ln -s /tmp tmp_link && ln -s /tmp/target.txt file_link")
    await sandbox.write_files({"tmp_link/planted.txt": "x", "file_link": "y"})
    outside = await sandbox.exec("ls -A /tmp; test -L tmp_link && echo link-kept; cat file_link 2>&1")
    assert "planted.txt" not in outside.stdout and "target.txt" not in outside.stdout, outside


# ----------------------------------------------------------------------------- bad input


BAD_REQUESTS = {
    "long file name": {"files": {"a" * 300: "x"}},
    "long fetch name": {"fetch_files": ["b" * 300]},
    "surrogate in code": {"code": "print('\ud800')"},
    "surrogate in stdin": {"stdin": "\udc80"},
    "surrogate in env": {"env": {"X": "\ud800"}},
    "surrogate in env name": {"env": {"X\ud800": "1"}},
    "surrogate in argv": {"argv": ["\ud800"]},
    "surrogate in a file name": {"files": {"\ud800.txt": "x"}},
    "NUL in env": {"env": {"X": "a\x00b"}},
    "NUL in argv": {"argv": ["a\x00b"]},
    "huge memory": {"limits": FAST.merged(memory_mb=1 << 50)},
    "huge pids": {"limits": FAST.merged(pids=1 << 62)},
    "huge cpus": {"limits": FAST.merged(cpus=1e15)},
    "huge file size": {"limits": FAST.merged(file_size_mb=1 << 50)},
    "huge output cap": {"limits": FAST.merged(output_bytes=1 << 50)},
}


#: Paths the shared model already refuses when the request is built (models.check_relative_path):
#: the caller gets a ValueError (pydantic's ValidationError) before any backend sees them.
MODEL_REFUSES = {"long file name", "long fetch name", "surrogate in a file name"}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
async def test_bad_input_is_an_invalid_request(sandbox: Any, case: str) -> None:
    fields: dict[str, Any] = {"code": "print('ok')", "limits": FAST, **BAD_REQUESTS[case]}
    if case in MODEL_REFUSES:
        with pytest.raises(ValueError, match="file path"):
            RunRequest(**fields)
        return
    request = RunRequest(**fields)
    with pytest.raises(InvalidRequest, match="docker") as raised:
        await sandbox.run(request)
    assert "sandbox" in str(raised.value)
    assert await sandbox.alive()
    assert (await sandbox.run(RunRequest(code="print('ok')", limits=FAST))).stdout == "ok\n"


async def test_bad_exec_and_file_calls_are_invalid_requests(sandbox: Any) -> None:
    for call in (
        lambda: sandbox.exec(["echo", "\ud800"]),
        lambda: sandbox.exec("echo hi", env={"X": "\ud800"}),
        lambda: sandbox.exec("cat", stdin="\ud800"),
        lambda: sandbox.write_files({"c" * 256: "x"}),
        lambda: sandbox.write_files({"d/" + "e" * 256 + "/f": "x"}),
        lambda: sandbox.read_files(["f" * 256]),
        lambda: sandbox.write_files({"ok.txt": "\udcff"}),
    ):
        with pytest.raises(InvalidRequest, match="docker"):
            await call()
    assert await sandbox.alive()


async def test_bad_limits_on_open_are_invalid_requests(backend: Any) -> None:
    with pytest.raises(InvalidRequest, match="memory_mb"):
        await backend.open(FAST.merged(memory_mb=1 << 50))


# ----------------------------------------------------------------------------- cleanup


async def test_cleanup_spares_the_sandboxes_of_live_processes(
    sandbox: Any, docker_client: Any, test_labels: dict[str, str]
) -> None:
    # This process is alive and its sandbox in use: cleanup (another process) must leave it alone.
    assert "removed 0 sandbox(es)" in run_cleanup_cli(test_labels)
    assert containers_of(docker_client, test_labels) == [sandbox.container_id]
    assert (await sandbox.run(RunRequest(code="print('in use')", limits=FAST))).stdout == "in use\n"
    assert "removed 1 sandbox(es)" in run_cleanup_cli(test_labels, "--force")
    assert containers_of(docker_client, test_labels) == []


# ----------------------------------------------------------------------------- tracebacks

TRACEBACKS = {
    "top level": "raise ValueError('bad')",
    "nested": "def f():\n    return 1 / 0\nf()",
    "syntax": "print('unterminated",
    "atexit": "import atexit\ndef bye():\n    raise RuntimeError('at exit')\natexit.register(bye)\nprint('main')",
    "thread": "import threading\ndef boom():\n    raise KeyError('in thread')\nt = threading.Thread(target=boom)\n"
    "t.start()\nt.join()",
    "chained": "try:\n    {}['k']\nexcept KeyError as exc:\n    raise ValueError('wrapped') from exc",
    "interrupt": "raise KeyboardInterrupt",
    "recursion": "def f(n):\n    return f(n + 1)\nf(0)",
}
ADDRESS = re.compile(r"0x[0-9a-f]+")
RUNNER_TRACES = ("sandboxkit", "<string>", "python_main", "_runner", "runner")


@pytest.mark.parametrize("case", sorted(TRACEBACKS))
async def test_tracebacks_name_only_the_users_files(test_labels: dict[str, str], case: str) -> None:
    from sandboxkit.backends.docker import DockerBackend

    fast, cold = DockerBackend(labels=test_labels), DockerBackend(labels=test_labels, python_fast=False)
    try:
        warm_box, cold_box = await fast.open(FAST), await cold.open(FAST)
        request = RunRequest(code=TRACEBACKS[case], limits=FAST)
        warm, reference = await warm_box.run(request), await cold_box.run(request)
        assert "Traceback" in warm.stderr or "Error" in warm.stderr, warm
        for word in RUNNER_TRACES:
            assert word not in warm.stderr, (word, warm.stderr)
        # Identical to a fresh python3 (object addresses aside), recursion depth included.
        assert (warm.status, warm.exit_code, warm.signal, ADDRESS.sub("0x?", warm.stderr)) == (
            reference.status,
            reference.exit_code,
            reference.signal,
            ADDRESS.sub("0x?", reference.stderr),
        )
    finally:
        await fast.aclose()
        await cold.aclose()


async def test_errors_starting_a_command_name_no_runner(sandbox: Any) -> None:
    await sandbox.write_files({"notexec.sh": "echo hi"})
    result = await sandbox.exec(["./notexec.sh"])
    assert result.status is Status.FAILED and result.exit_code == 126, result
    assert "Permission denied" in result.stderr
    for word in RUNNER_TRACES:
        assert word not in result.stderr, (word, result.stderr)


# ----------------------------------------------------------------------------- output: head and tail


async def test_ten_megabytes_then_a_traceback_keeps_the_end(sandbox: Any) -> None:
    code = (
        "import sys\nfor i in range(10):\n    sys.stdout.write(str(i) * (1 << 20))\n"
        "    sys.stderr.write('e' * (1 << 20))\nprint('FINAL ANSWER 42')\nraise ValueError('boom')"
    )
    limits = FAST.merged(output_bytes=1000)
    result = await sandbox.run(RunRequest(code=code, limits=limits))
    assert result.status is Status.FAILED and result.exit_code == 1, result  # ran to its end, not stopped
    assert result.stdout_truncated and result.stderr_truncated
    assert result.stderr.endswith("ValueError: boom\n"), result.stderr[-300:]
    expected = b"".join(str(i).encode() * (1 << 20) for i in range(10)) + b"FINAL ANSWER 42\n"
    assert result.stdout == cut_head_tail(expected, 1000, 0.5)[0].decode()


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
async def test_every_length_around_the_cap_is_cut_like_the_host(sandbox: Any, fraction: float) -> None:
    """The runner keeps head and tail bytes itself (Python here, Go in the static-runner run of this module);
    the host's join of them must be ``cut_head_tail`` of the stream at every length, edges included."""
    limits = FAST.merged(output_bytes=100, output_head_fraction=fraction)
    for size in (0, 1, 30, 99, 100, 101, 175, 1000, 70_000):
        data = bytes(48 + i % 43 for i in range(size))
        code = f"import sys\nsys.stdout.write(''.join(chr(48 + i % 43) for i in range({size})))"
        result = await sandbox.run(RunRequest(code=code, limits=limits))
        expected, cut = cut_head_tail(data, 100, fraction)
        assert (result.stdout, result.stdout_truncated) == (expected.decode(), cut), (size, result)


async def test_head_fraction_and_stop_bytes(sandbox: Any) -> None:
    code = "import sys\nsys.stdout.write('h' * 3000 + 't' * 3000)"
    limits = FAST.merged(output_bytes=1000, output_head_fraction=0.25)
    kept = await sandbox.run(RunRequest(code=code, limits=limits))
    assert kept.status is Status.OK and kept.stdout == cut_head_tail(b"h" * 3000 + b"t" * 3000, 1000, 0.25)[0].decode()
    flood = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"
    stopped = await sandbox.run(RunRequest(code=flood, limits=limits.merged(output_stop_bytes=4 << 20)))
    assert stopped.status is Status.OUTPUT_LIMIT and stopped.stdout_truncated, stopped
    assert stopped.duration_s < FAST.timeout_s / 2, stopped  # stopped at the byte limit, not by the timeout


# ----------------------------------------------------------------------------- what other containers show


async def test_no_other_container_is_visible_in_sys(sandbox: Any) -> None:
    result = await sandbox.exec(
        "ls /sys/fs/cgroup/memory/ /sys/fs/cgroup/ 2>/dev/null | grep -Ec '^[0-9a-f]{64}$|docker'"
    )
    assert result.stdout.strip() == "0", result
