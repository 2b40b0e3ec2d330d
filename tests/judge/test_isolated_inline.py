"""A problem's only isolated assert case: the harness process is its checker, with the same verdicts.

Each program is graded twice on the real subprocess backend with ``isolate_asserts``: with its one case
(the harness runs the test itself and forks only the solution) and with a second, trivial case after
it (a forked checker per case, the path every multi-case problem takes). Case 0's status and message
must be the same both ways, for every way the solution or the test can end; the forges must fail.
"""

from __future__ import annotations

import marshal
import subprocess
import sys
import time
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import anyio
import pytest

from sandboxkit import SandboxPool
from sandboxkit.judge import AssertCase, grade
from sandboxkit.judge.isolated import build_isolated_harness, parse_isolated_output, runs_inline
from support.judge import needs_subprocess

pytestmark = needs_subprocess

HEADER = "import ctypes, os, signal, sys, threading, time\n\ndef f(x):\n"
TIMEOUT_S = 0.5
TEST = "assert f(1) == 2"

#: (name, body of ``f``, test code, expected status of case 0, a piece of its message).
PROGRAMS = [
    ("passes", "    return x + 1", TEST, "passed", ""),
    ("raises", "    raise ValueError('no')", TEST, "error", "ValueError: no (main.py line 4)"),
    ("sys.exit", "    sys.exit(3)", TEST, "error", "sys.exit(3)"),
    ("os._exit(3)", "    os._exit(3)", TEST, "error", "exited (code 3)"),
    ("segfault", "    ctypes.string_at(0)", TEST, "error", "signal 11"),
    ("cpu loop", "    while True:\n        pass", TEST, "timeout", "(CPU time)"),
    ("sleeps", "    time.sleep(60)", TEST, "timeout", "wall-clock"),
    ("MemoryError", "    return bytearray(1 << 40)", TEST, "memory_exceeded", "MemoryError"),
    ("killed by SIGKILL", "    os.kill(os.getpid(), signal.SIGKILL)", TEST, "memory_exceeded", "SIGKILL"),
    (
        "leaves a thread running",
        "    threading.Thread(target=time.sleep, args=(60,)).start()\n    return x + 1",
        TEST,
        "passed",
        "",
    ),
    ("wrong answer", "    return x", TEST, "error", "AssertionError (<test> line 1): assert f(1) == 2"),
    # The test's own time: its CPU (the checker's limit), a C call no signal handler interrupts (the
    # kernel's RLIMIT_CPU), a sleep (the wall limit).
    ("test loops", "    return x + 1", TEST + "\nwhile True:\n    pass", "timeout", "(CPU time)"),
    ("test in one C call", "    return x + 1", TEST + " and sum(range(10 ** 12)) > 0", "timeout", "(CPU time)"),
    ("test sleeps", "    return x + 1", TEST + "\nimport time\ntime.sleep(60)", "timeout", "wall-clock"),
]


async def _case0(pool: SandboxPool, body: str, tests: list[dict[str, str]]) -> tuple[str, str]:
    verdict = await grade(pool, f"```python\n{HEADER}{body}\n```", tests, timeout_s=TIMEOUT_S, isolate_asserts=True)
    case = verdict.cases[0]
    return case.status, case.message


async def test_the_inline_checker_gives_a_forked_checkers_verdicts(pool: SandboxPool) -> None:
    assert runs_inline([AssertCase(code="pass")]) and not runs_inline([AssertCase(code="pass")] * 2)
    found: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {}

    async def judge(name: str, body: str, test: str) -> None:
        one = [{"type": "assert", "code": test}]
        found[name] = (
            await _case0(pool, body, one),
            await _case0(pool, body, [*one, {"type": "assert", "code": "pass"}]),
        )

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for name, body, test, _, _ in PROGRAMS:
            tg.start_soon(judge, name, body, test)
    differ = [(name, *found[name]) for name, *_ in PROGRAMS if found[name][0] != found[name][1]]
    assert not differ, differ
    wrong = [
        (name, found[name][0])
        for name, _, _, status, piece in PROGRAMS
        if found[name][0][0] != status or piece not in found[name][0][1]
    ]
    assert not wrong, wrong
    # Nothing left sleeping for 60 s held a run: each ends with its case's limits.
    assert time.monotonic() - started < 50


#: The test prints what the solution returned: in the checker's own process that must not reach the
#: run's stdout (it is /dev/null, as a forked checker's), where a report line would turn the 0 into a
#: pass or a ``cannot_isolate`` (a reward of ``None``, which TRL leaves out of the group).
PRINT_FORGE = """
def f(x):
    mark = "@@sandboxkit-case@@ "
    lines = [{"i": 0, "t": 0.0, "cpu": 0.0, "status": "ok"}, {"cannot": "forged"}, {"done": True}]
    return "\\n" + "".join(mark + repr(line) + "\\n" for line in lines)
"""

#: Kills the harness process (the checker itself, here) before the test can fail.
KILL_PARENT = """
import os, signal
def f(x):
    os.kill(os.getppid(), signal.SIGKILL)
    return 2
"""


async def test_forges_fail_against_the_inline_checker(pool: SandboxPool) -> None:
    forged = {
        "print": await grade(pool, PRINT_FORGE, [{"type": "assert", "code": "print(f(1))\nassert False"}]),
        "kill": await grade(pool, KILL_PARENT, [{"type": "assert", "code": TEST}]),
    }
    assert {name: v.reward for name, v in forged.items()} == {"print": 0.0, "kill": 0.0}, forged
    assert forged["print"].cases[0].message.startswith("AssertionError"), forged["print"].cases


def test_the_harness_runs_from_source_where_its_bytecode_does_not_fit(tmp_path: Path) -> None:
    # Compiled for interpreters with this one's magic number, compressed source for any other: the
    # same results both ways, inline (one case) and with forked checkers.
    source = "def f(x):\n    if x < 0:\n        raise ValueError('boom')\n    return x + 1\n"
    cases = [AssertCase(code="assert f(-1) == 0"), AssertCase(code="assert f(1) == 2")]
    for group in (cases, cases[1:]):
        script = build_isolated_harness(source, group, timeout_s=1.0)
        assert repr(MAGIC_NUMBER) in script and "'bc': '" in script  # the tests go compiled too
        other = script.replace(repr(MAGIC_NUMBER), repr(b"\x00\x00\r\n"))
        for text in (script, other):
            path = tmp_path / "harness.py"  # a file, as the backends run it (over 128 KiB: too long for -c)
            path.write_text(text)
            done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)
            header, results = parse_isolated_output(done.stdout)
            assert header.get("done"), done.stderr
            statuses = [results[i]["status"] for i in range(len(group))]
            assert statuses == (["error", "ok"] if len(group) == 2 else ["ok"]), results
            if len(group) == 2:
                assert "ValueError: boom (main.py line 3)" in str(results[0]["error"])


def test_the_host_compiles_the_test_as_the_sandbox_would() -> None:
    from sandboxkit.judge.isolated import _test_bytecode

    def run(test: str) -> None:
        bytecode = _test_bytecode(test)
        assert bytecode is not None
        exec(marshal.loads(bytes.fromhex(bytecode)), {})

    # Asserts kept whatever the host's -O; no ``from __future__ import annotations`` of the host's
    # module (the annotation is evaluated, as in the sandbox); <test> as the file name.
    with pytest.raises(AssertionError):
        run("assert 1 == 2")
    with pytest.raises(NameError):
        run("x: not_defined_anywhere = 1")
    with pytest.raises(ZeroDivisionError) as raised:
        run("\n1 / 0")
    assert raised.traceback[-1].frame.code.raw.co_filename == "<test>" and raised.traceback[-1].lineno == 1
    assert _test_bytecode("def (") is None


async def test_a_test_that_does_not_compile_is_reported_from_the_sandbox(pool: SandboxPool) -> None:
    verdict = await grade(pool, "def f(x):\n    return x\n", [{"type": "assert", "code": "assert f(1) ==\n"}])
    assert verdict.cases[0].status == "error" and "SyntaxError" in verdict.cases[0].message, verdict.cases
