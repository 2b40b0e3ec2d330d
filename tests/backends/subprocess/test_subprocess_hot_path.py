"""The host's per-run work on the warm path (issue 30: host CPU per run).

A pooled run on a warm sandbox asks several times whether the fork server still lives. Each ask
is a ``waitpid`` syscall; a process once dead stays dead, and a server that dies between two asks
is seen by the command itself (its socket closes), so one ask per step is enough, and the command
trusts the lease's ask it follows without a pause. The bound is
on the count, not on time: counts do not depend on the machine's load.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.models import RunRequest, RunResult, Status
from sandboxkit.pool import SandboxPool
from support.subprocess_sandboxes import FAST, RecordingBackend

#: asks of the server's liveness per warm pooled run: the reset's report check and the lease's
#: server lookup (the command itself trusts the lookup it follows without a pause).
MAX_POLLS_PER_RUN = 2


async def test_a_warm_pooled_run_asks_the_server_for_liveness_at_most_twice(
    pool: SandboxPool, backend: RecordingBackend
) -> None:
    await pool.run("print(1)")  # the previous tenant's report is pending, as in steady state
    (sandbox,) = backend.opened
    server = sandbox._server
    assert server is not None and server.proc is not None
    polls = 0
    real_poll = server.proc.poll

    def counting_poll() -> int | None:
        nonlocal polls
        polls += 1
        code: int | None = real_poll()
        return code

    server.proc.poll = counting_poll  # type: ignore[method-assign]
    runs = 5
    for _ in range(runs):
        result = await pool.run("print(1)")
        assert result.stdout == "1\n"
    assert sandbox._server is server, "the warm path restarted the server"
    assert isinstance(server.proc, subprocess.Popen)
    assert polls <= MAX_POLLS_PER_RUN * runs, f"{polls / runs:.1f} liveness asks per run"


async def test_a_warm_pooled_python_run_leaves_writing_its_source_to_the_sandbox(
    pool: SandboxPool, backend: RecordingBackend
) -> None:
    """The host opens, chowns, writes and closes nothing in the workspace for ``print(1)``.

    The forked child writes ``main.py`` itself (it already reads the request), before the
    program runs; the file is still there for ``__file__``, tracebacks and the program's own reads.
    """
    await pool.run("print(1)")
    (sandbox,) = backend.opened
    writes = 0
    real_write = sandbox.workspace.write

    def counting_write(files: Mapping[str, bytes | str]) -> None:
        nonlocal writes
        writes += 1
        real_write(files)

    sandbox.workspace.write = counting_write  # type: ignore[method-assign]
    for i in range(3):
        result = await pool.run(f"print(open(__file__).read())  # run {i}")
        assert result.stdout == f"print(open(__file__).read())  # run {i}\n", result
    result = await pool.run("print(1)", files={"data.txt": "x"})  # files still go through the host
    assert result.stdout == "1\n", result
    assert writes == 1, f"{writes} host-side workspace writes for 3 runs without files and 1 with"


@pytest.mark.parametrize(
    "plant",
    [
        "os.remove('main.py'); os.symlink('/etc/passwd', 'main.py')",
        "os.remove('main.py'); os.mkfifo('main.py')",
        "os.remove('main.py'); os.makedirs('main.py/sub'); os.symlink('/etc', 'main.py/link')",
    ],
)
async def test_whatever_a_session_left_at_main_py_the_next_run_runs_its_own_code(
    sandbox: SubprocessSandbox, plant: str
) -> None:
    """A run's own earlier program may leave a link, a FIFO or a directory tree at its file's name."""
    assert (await sandbox.run(RunRequest(code=f"import os\n{plant}\n", limits=FAST))).status is Status.OK
    with anyio.fail_after(20):
        result = await sandbox.run(RunRequest(code="print('mine')", limits=FAST))
    assert result.stdout == "mine\n", result
    assert os.path.exists("/etc/passwd") and os.path.isdir("/etc")


async def test_a_warm_pooled_run_registers_nothing_with_the_event_loop(pool: SandboxPool) -> None:
    """The server's socket and the run's pipes wait in the server's own epoll set (``_watch``).

    ``loop.add_reader`` / ``remove_reader`` cost about 3 microseconds of Python each on asyncio's
    loop; three descriptors per run made them a sixteenth of the host's CPU per run.
    """
    await pool.run("print(1)")  # the server's set joins the loop once
    loop = asyncio.get_running_loop()
    calls: list[str] = []
    for name in ("add_reader", "remove_reader", "add_writer", "remove_writer"):
        real = getattr(loop, name)

        def counting(*args: object, _name: str = name, _real: Any = real) -> Any:
            calls.append(_name)
            return _real(*args)

        setattr(loop, name, counting)
    try:
        for _ in range(3):
            result = await pool.run("import sys; print(1); print(2, file=sys.stderr)")
            assert (result.stdout, result.stderr) == ("1\n", "2\n"), result
    finally:
        for name in ("add_reader", "remove_reader", "add_writer", "remove_writer"):
            delattr(loop, name)
    assert calls == [], calls


async def test_a_warm_pooled_run_makes_no_descriptor_non_blocking_one_by_one(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipes are made with ``O_NONBLOCK`` (``pipe2``); ``set_blocking`` is an ``ioctl`` and Python around it, each."""
    await pool.run("print(1)")
    calls = 0
    real = os.set_blocking

    def counting(fd: int, blocking: bool) -> None:
        nonlocal calls
        calls += 1
        real(fd, blocking)

    monkeypatch.setattr(os, "set_blocking", counting)
    for _ in range(3):
        assert (await pool.run("print(1)", stdin="some input")).stdout == "1\n"
    assert calls == 0, f"{calls / 3:.1f} set_blocking calls per run"


async def test_the_program_gets_blocking_standard_streams(pool: SandboxPool) -> None:
    """Only the host's ends of the pipes are non-blocking; a program's reads and writes wait as usual."""
    code = "import os, sys\nprint(*(os.get_blocking(fd) for fd in (0, 1, 2)), sys.stdin.read())"
    assert (await pool.run(code, stdin="in")).stdout == "True True True in\n"
    result = await pool.exec(["python3", "-c", code], stdin="in")
    assert result.stdout == "True True True in\n", result


async def test_a_run_result_is_built_without_validating_what_the_host_typed_itself(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every field of a run's result comes from sandboxkit's own code, already typed: ``model_construct``.

    The result is the same object a validated construction gives, fields set included.
    """
    await pool.run("print(1)")
    validated = 0
    real_init = RunResult.__init__

    def counting_init(self: RunResult, **data: Any) -> None:
        nonlocal validated
        validated += 1
        real_init(self, **data)

    monkeypatch.setattr(RunResult, "__init__", counting_init)
    results = [
        await pool.run("print(1)"),
        await pool.run("import sys; sys.exit(3)"),
        await pool.run("print('x')", fetch_files=["out.txt"], files={"out.txt": b"y"}),
    ]
    assert validated == 0, f"{validated} validated results for 3 runs"
    monkeypatch.undo()
    for result in results:
        again = RunResult.model_validate(result.model_dump())
        assert again == result
        assert again.model_fields_set == result.model_fields_set
    assert results[1].status is Status.FAILED and results[2].files == {"out.txt": b"y"}


async def test_a_warm_pooled_run_schedules_one_timer(pool: SandboxPool) -> None:
    """The host's backstop on the server's reply is the run's only timer.

    A timer is a handle pushed on the loop's heap (Python comparisons) and cancelled later. The
    server's state report on the last tenant's command, when it comes after this command was
    sent, is waited for under the same timer as the exit; the program's pipes are at EOF when the
    server reports its exit (every writer is dead by then), so they are read to the end at once
    rather than under a timer of their own; a reset that finishes without waiting needs no
    timeout scope either.
    """
    await pool.run("print(1)")
    loop = asyncio.get_running_loop()
    timers = 0
    real = loop.call_at

    def counting(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        nonlocal timers
        timers += 1
        return real(*args, **kwargs)

    setattr(loop, "call_at", counting)  # noqa: B010 (an instance attribute over the method, removed below)
    try:
        runs = 6
        for i in range(runs):
            result = await pool.run(f"import sys; print({i}); print('e' * 70000, file=sys.stderr)")
            assert (result.stdout, len(result.stderr)) == (f"{i}\n", 70001), result
    finally:
        delattr(loop, "call_at")
    assert timers <= runs, f"{timers / runs:.1f} timers per run"


async def test_the_host_s_wipe_removes_a_run_s_file_with_one_system_call(
    pool: SandboxPool, backend: RecordingBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``unlink`` first: it removes a file, link, FIFO or socket itself (never what a link names), and
    refuses a directory, which only then is looked at (and removed by fd, ``rmtree(dir_fd=)``)."""
    await pool.run("print(1)")
    (sandbox,) = backend.opened
    stats = 0
    real = os.stat

    def counting(*args: Any, **kwargs: Any) -> os.stat_result:
        nonlocal stats
        stats += "dir_fd" in kwargs  # a look inside the workspace (the lease's liveness check is not)
        return real(*args, **kwargs)

    monkeypatch.setattr(os, "stat", counting)
    code = "import os; os.mkdir('d'); open('d/f', 'w').close(); os.symlink('/etc/passwd', 'l'); print(1)"
    result = await pool.run(code)
    assert result.stdout == "1\n", result
    # With bwrap the reset leaves the files to the next command's server; the host's wipe is what
    # every other operation runs first (and what a sandbox without bwrap runs at its reset).
    sandbox._check_open()
    assert os.listdir(sandbox.workspace.path) == [], "the wipe left files"
    assert os.path.exists("/etc/passwd")
    for _ in range(3):
        assert (await pool.run("print(1)")).stdout == "1\n"
        sandbox._check_open()
    assert stats == 0, f"{stats} stat calls inside the workspace for 4 wipes"


async def test_a_run_result_with_every_field_given_skips_model_construct_s_per_field_lookups(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``model_construct`` looks up aliases and defaults field by field (some 40 calls for a ``RunResult``);
    the backend gives every field, in order, so the result's ``__dict__`` is set in one step. Same
    object as a validated one, fields set, equality and ``repr`` included."""
    await pool.run("print(1)")
    constructed = 0
    real = RunResult.model_construct.__func__  # type: ignore[attr-defined]

    def counting(cls: type[RunResult], *args: Any, **values: Any) -> RunResult:
        nonlocal constructed
        constructed += 1
        built: RunResult = real(cls, *args, **values)
        return built

    monkeypatch.setattr(RunResult, "model_construct", classmethod(counting))
    results = [await pool.run("print(1)"), await pool.run("import sys; sys.exit(3)")]
    execs = [await pool.exec("echo hi")]
    monkeypatch.undo()
    assert constructed == 0, f"{constructed} model_construct calls for 2 runs"
    for result in [*results, *execs]:
        again = type(result).model_validate(result.model_dump())
        assert again == result and repr(again) == repr(result)
        assert again.model_fields_set == result.model_fields_set
        assert result.model_dump() == again.model_dump()
    assert results[0].files == {} and results[0].files is not results[1].files
    assert (results[1].status, execs[0].stdout) == (Status.FAILED, "hi\n")


#: Python and C function calls in the host's thread per warm pooled ``print(1)``, the loop's own included
#: (the fewest of 15 runs). 513-655 before the third cut of issue 30, 375-501 after, 340-364 after the
#: fourth (whose cuts have counting tests of their own): the fewest is the path's own cost, while load
#: adds wake-ups (a CI run at load 7 had a median of 501, past a median budget).
MAX_CALLS_PER_RUN = 480


async def test_a_warm_pooled_run_stays_within_its_budget_of_calls(pool: SandboxPool) -> None:
    """The host's CPU per run is mostly the interpreter's calls, each cheap, none dominant: the count is
    the budget that a profile cannot show growing one call at a time. Counted, not timed; and the fewest
    of 15 runs, because load only adds calls (output and exit waking the loop twice instead of once)."""
    for _ in range(3):
        await pool.run("print(1)")
    counts = []
    for _ in range(15):
        calls = 0

        def count(frame: object, event: str, arg: object) -> None:
            nonlocal calls
            calls += event in ("call", "c_call")

        sys.setprofile(count)
        try:
            result = await pool.run("print(1)")
        finally:
            sys.setprofile(None)
        assert result.stdout == "1\n", result
        counts.append(calls)
    assert min(counts) <= MAX_CALLS_PER_RUN, sorted(counts)


async def test_a_warm_pooled_run_changes_no_watch(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's socket and held output pipes are watched for the server's life: a run adds and
    removes nothing (two ``epoll_ctl`` calls and their Python each, per run, before)."""
    from sandboxkit.backends.subprocess._watch import Watcher

    await pool.run("print(1)")
    changes = 0
    real_add, real_remove = Watcher.add, Watcher.remove

    def add(self: Watcher, fd: int, callback: Any) -> None:
        nonlocal changes
        changes += 1
        real_add(self, fd, callback)

    def remove(self: Watcher, fd: int) -> None:
        nonlocal changes
        changes += 1
        real_remove(self, fd)

    monkeypatch.setattr(Watcher, "add", add)
    monkeypatch.setattr(Watcher, "remove", remove)
    for _ in range(5):
        assert (await pool.run("print(1)")).stdout == "1\n"
    assert changes == 0, f"{changes / 5:.1f} watch changes per run"


async def test_a_warm_pooled_run_works_out_its_limits_once(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's runs repeat one frozen ``Limits``: their rlimits and output limits are worked out once."""
    from sandboxkit.backends.subprocess import _sandbox

    await pool.run("print(1)")
    worked_out = 0
    real = _sandbox.rlimits_for

    def counting(*args: Any, **kwargs: Any) -> list[tuple[int, int]]:
        nonlocal worked_out
        worked_out += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_sandbox, "rlimits_for", counting)
    for _ in range(5):
        assert (await pool.run("print(1)")).stdout == "1\n"
    assert worked_out == 0, f"{worked_out} times for 5 runs with the same limits"


async def test_a_run_with_other_limits_gets_its_own(sandbox: SubprocessSandbox) -> None:
    """The limits worked out for one step never reach a step with other limits (the cache is by identity)."""
    code = "print('x' * 1000)"
    small = await sandbox.run(RunRequest(code=code, limits=FAST.merged(output_bytes=100)))
    full = await sandbox.run(RunRequest(code=code, limits=FAST))
    again = await sandbox.run(RunRequest(code=code, limits=FAST.merged(output_bytes=100)))
    assert (small.stdout_truncated, full.stdout_truncated, again.stdout_truncated) == (True, False, True)
    assert full.stdout == "x" * 1000 + "\n"
    timed = await sandbox.run(RunRequest(code="import time\ntime.sleep(5)", limits=FAST.merged(timeout_s=0.5)))
    assert timed.status is Status.TIMEOUT
