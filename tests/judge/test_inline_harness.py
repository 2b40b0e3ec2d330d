"""A problem's only call/assert case runs inline in the harness process: the same verdicts as a forked child.

Each program is graded twice on the real subprocess backend: with its one case (the harness runs it
in its own process) and with a second, trivial case after it (the harness forks a child per case, the
path every multi-case problem takes). Case 0's status and message must be the same both ways, for
every way a case can end; a wrong reading of an inline death (exit code, signal, SIGPROF/SIGXCPU,
SIGKILL, the wall timer) shows up as a difference.
"""

from __future__ import annotations

import time

import anyio
import pytest

from sandboxkit import SandboxPool
from sandboxkit.judge import AssertCase, CallCase, grade
from sandboxkit.judge.harness import build_python_harness, runs_inline
from support.judge import needs_subprocess

pytestmark = needs_subprocess

#: (name, body of ``f``, expected status of case 0, a piece of its message).
PROGRAMS = [
    ("passes", "    return x + 1", "passed", ""),
    ("raises", "    raise ValueError('no')", "error", "ValueError: no (main.py line 4)"),
    ("sys.exit", "    sys.exit(3)", "error", "sys.exit(3)"),
    ("os._exit(3)", "    os._exit(3)", "error", "exited (code 3)"),
    ("os._exit(0)", "    os._exit(0)", "error", "exited (code 0)"),
    ("segfault", "    ctypes.string_at(0)", "error", "signal 11"),
    ("cpu loop", "    while True:\n        pass", "timeout", "(CPU time)"),
    (
        "loop ignoring SIGPROF and SIGXCPU",
        "    signal.signal(signal.SIGPROF, signal.SIG_IGN)\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
        "    while True:\n        pass",
        "timeout",
        "(CPU time)",
    ),
    ("sleeps", "    time.sleep(60)", "timeout", "wall-clock"),
    ("MemoryError", "    return bytearray(1 << 40)", "memory_exceeded", "MemoryError"),
    ("killed by SIGKILL", "    os.kill(os.getpid(), signal.SIGKILL)", "memory_exceeded", "SIGKILL"),
    ("huge error message", "    raise ValueError('x' * 400_000)", "output_limit", ""),
    ("noisy", "    print('x' * 3_000_000); sys.stderr.write('y' * 100_000)\n    return x + 1", "passed", ""),
    (
        "leaves a thread running",
        "    threading.Thread(target=time.sleep, args=(60,)).start()\n    return x + 1",
        "passed",
        "",
    ),
    ("wrong answer", "    return x", "error", "AssertionError (<test> line 1): assert f(1) == 2"),
]

HEADER = "import ctypes, os, signal, sys, threading, time\n\ndef f(x):\n"
TIMEOUT_S = 0.5


async def _case0(pool: SandboxPool, body: str, tests: list[dict[str, str]]) -> tuple[str, str]:
    # isolate_asserts=False: the inline path is the trusting harness's (isolated asserts have their own).
    verdict = await grade(pool, f"```python\n{HEADER}{body}\n```", tests, timeout_s=TIMEOUT_S, isolate_asserts=False)
    case = verdict.cases[0]
    return case.status, case.message


async def test_inline_case_verdicts_match_a_forked_child(pool: SandboxPool) -> None:
    one = [{"type": "assert", "code": "assert f(1) == 2"}]
    two = [*one, {"type": "assert", "code": "pass"}]
    assert runs_inline([AssertCase(code="pass")]) and not runs_inline([AssertCase(code="pass")] * 2)
    found: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {}

    async def judge(name: str, body: str) -> None:
        found[name] = (await _case0(pool, body, one), await _case0(pool, body, two))

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for name, body, _, _ in PROGRAMS:
            tg.start_soon(judge, name, body)
    differ = [(name, *found[name]) for name, *_ in PROGRAMS if found[name][0] != found[name][1]]
    assert not differ, differ
    wrong = [
        (name, found[name][0])
        for name, _, status, piece in PROGRAMS
        if found[name][0][0] != status or piece not in found[name][0][1]
    ]
    assert not wrong, wrong
    # The thread left sleeping for 60 s held neither run: the harness ends with its case.
    assert time.monotonic() - started < 50


async def test_inline_call_case_value_and_wrong_answer(pool: SandboxPool) -> None:
    code = "```python\ndef f(x):\n    return [x, (x, x)]\n```"
    right = await grade(pool, code, [{"type": "call", "fn_name": "f", "args": [1], "expected": [1, [1, 1]]}])
    wrong = await grade(pool, code, [{"type": "call", "fn_name": "f", "args": [1], "expected": [1, [1, 2]]}])
    assert right.status == "ok" and right.cases[0].status == "passed", right
    assert wrong.cases[0].status == "wrong_answer", wrong


def test_only_a_single_call_or_assert_case_runs_inline() -> None:
    assert runs_inline([CallCase(fn_name="f", expected=1)])
    with pytest.raises(ValueError, match="single call or assert case"):
        build_python_harness("pass", [AssertCase(code="pass")] * 2, timeout_s=1, inline=True)
    # The inline harness leaves the fork scheduler out (it is paid for on every run), the forked one keeps it.
    inline = build_python_harness("pass", [AssertCase(code="pass")], timeout_s=1)
    forked = build_python_harness("pass", [AssertCase(code="pass")], timeout_s=1, inline=False)
    assert len(inline) < 0.7 * len(forked)
