"""Harnesses held by the fork server (``preload_python_module``): the same verdicts, and a way back.

On the subprocess backend the judge's harnesses (the plain one and the isolated one) are modules the
fork server loads once, and a run carries only its data and a few lines. Every way a case can end must
be judged exactly as by the harness the program carries itself (other backends, older interpreters),
and a sandbox that lacks the module despite the backend's promise must still be graded right (the
program prints ``NOLIB``; the judge runs the carried harness).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from test_inline_harness import PROGRAMS as PLAIN_PROGRAMS
from test_isolated_inline import HEADER, PROGRAMS, TIMEOUT_S

from sandboxkit import SandboxPool
from sandboxkit.judge import AssertCase, grade
from sandboxkit.judge import _harness_run as python_module
from sandboxkit.judge import harness as harness_module
from sandboxkit.judge import isolated as isolated_module
from sandboxkit.judge.isolated import build_isolated_harness, library, warm_module
from support.judge import RecordingBackend, needs_subprocess, pool_over

pytestmark = needs_subprocess


async def _verdicts(pool: SandboxPool) -> dict[str, tuple[str, str, str, str]]:
    """Case 0 (status, message) of each program with one case and with a second, trivial one."""
    found: dict[str, tuple[str, str, str, str]] = {}

    async def judge(name: str, body: str, test: str) -> None:
        code = f"```python\n{HEADER}{body}\n```"
        one = [{"type": "assert", "code": test}]
        single = await grade(pool, code, one, timeout_s=TIMEOUT_S)
        double = await grade(pool, code, [*one, {"type": "assert", "code": "pass"}], timeout_s=TIMEOUT_S)
        found[name] = (single.cases[0].status, single.cases[0].message, double.cases[0].status, double.cases[0].message)

    async with anyio.create_task_group() as tg:
        for name, body, test, _, _ in PROGRAMS:
            tg.start_soon(judge, name, body, test)
    return found


async def test_the_held_harness_gives_the_carried_harness_verdicts(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert warm_module(pool.backend) == library()[0]  # the subprocess backend holds it
    held = await _verdicts(pool)
    monkeypatch.setattr(isolated_module, "warm_module", lambda backend: None)
    carried = await _verdicts(pool)
    assert held == carried
    wrong = [
        (name, held[name])
        for name, _, _, status, piece in PROGRAMS
        if held[name][0] != status or piece not in held[name][1]
    ]
    assert not wrong, wrong


def test_a_program_for_a_held_harness_carries_only_its_data() -> None:
    cases = [AssertCase(code="assert f(1) == 2")]
    name = library()[0]
    held = build_isolated_harness("def f(x):\n    return x + 1\n", cases, timeout_s=1.0, module=name)
    carried = build_isolated_harness("def f(x):\n    return x + 1\n", cases, timeout_s=1.0)
    data = held.split("\nimport sys as _s\n")[0]
    assert carried.startswith(data) and name in held
    assert len(held) - len(data) < 400 < 20_000 < len(carried) - len(data)


class _Promises(RecordingBackend):
    """Says it holds the harness but never loads it: a server that could not (an older interpreter)."""

    def preload_python_module(self, name: str, source: str) -> bool:
        return True


@pytest.fixture
async def promising() -> AsyncIterator[tuple[SandboxPool, _Promises]]:
    backend = _Promises()
    async with pool_over(backend, 2) as p:
        yield p, backend


async def test_a_sandbox_without_the_promised_module_is_graded_with_the_carried_harness(
    promising: tuple[SandboxPool, _Promises],
) -> None:
    pool, backend = promising
    tests = [{"type": "assert", "code": "assert f(1) == 2"}]
    right = await grade(pool, "def f(x):\n    return x + 1\n", tests)
    wrong = await grade(pool, "def f(x):\n    return x\n", tests)
    assert (right.reward, wrong.reward) == (1.0, 0.0), (right, wrong)
    assert wrong.cases[0].message.startswith("AssertionError"), wrong.cases
    scripts = [r.code for r in backend.runs("python")]
    assert len(scripts) == 4  # each problem twice: the short program (``NOLIB``), then the whole harness
    assert [library()[0] in s for s in scripts] == [True, False, True, False]


async def _plain_verdicts(pool: SandboxPool) -> dict[str, tuple[object, ...]]:
    """Every case's (status, message) of each program as a call case, an assert case and stdio cases."""
    found: dict[str, tuple[object, ...]] = {}

    async def judge(name: str, body: str) -> None:
        code = f"```python\n{HEADER}{body}\n\nif __name__ == '__main__':\n    print(f(int(input())))\n```"
        call = [{"type": "call", "fn_name": "f", "args": [1], "expected": 2}]
        both = [*call, {"type": "assert", "code": "assert f(1) == 2"}]
        stdio = [
            {"type": "stdio", "stdin": "1\n", "expected_stdout": "2\n"},
            {"type": "stdio", "stdin": "2\n", "expected_stdout": "3\n"},
        ]
        verdicts = [
            await grade(pool, code, tests, timeout_s=TIMEOUT_S, isolate_asserts=False) for tests in (call, both, stdio)
        ]
        found[name] = tuple((c.status, c.message) for v in verdicts for c in v.cases)

    async with anyio.create_task_group() as tg:
        for name, body, _, _ in PLAIN_PROGRAMS:
            tg.start_soon(judge, name, body)
    return found


def _settled(verdicts: dict[str, tuple[object, ...]]) -> dict[str, tuple[object, ...]]:
    """The verdicts with each timed-out case's message left out (see the test below)."""
    return {
        name: tuple((status, "" if status == "timeout" else message) for status, message in cases)  # type: ignore[misc]
        for name, cases in verdicts.items()
    }


async def test_the_held_plain_harness_gives_the_carried_harness_verdicts(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert harness_module.warm_module(pool.backend) == harness_module.library()[0]
    held = await _plain_verdicts(pool)
    monkeypatch.setattr(python_module, "warm_module", lambda backend: None)
    carried = await _plain_verdicts(pool)
    # A timed-out case's message says where the clock stopped it, which a loaded machine moves
    # (a fresh machine at load 16 saw one differ); its status must still agree, every other message too.
    assert _settled(held) == _settled(carried)
    # the call, the call and the assert, the two stdio cases (its main block: f's ending, not main's)
    assert held["passes"] == (("passed", ""),) * 5, held["passes"]
    wrong = ["wrong_answer", "wrong_answer", "error", "wrong_answer", "wrong_answer"]  # an assert raises
    assert [status for status, _ in held["wrong answer"]] == wrong, held["wrong answer"]


async def test_a_sandbox_without_the_promised_plain_harness_is_graded_with_the_carried_one(
    promising: tuple[SandboxPool, _Promises],
) -> None:
    pool, backend = promising
    tests = [{"type": "call", "fn_name": "f", "args": [1], "expected": 2}]
    right = await grade(pool, "def f(x):\n    return x + 1\n", tests)
    wrong = await grade(pool, "def f(x):\n    return x\n", tests)
    assert (right.reward, wrong.reward) == (1.0, 0.0), (right, wrong)
    scripts = [r.code for r in backend.runs("python")]
    assert [harness_module.library()[0] in s for s in scripts] == [True, False, True, False]
