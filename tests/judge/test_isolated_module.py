"""The isolated harness held by the fork server (``preload_python_module``): the same verdicts, a way back.

On the subprocess backend the judge's isolated harness is a module the fork server loads once, and a run
carries only its data and a few lines. Every way a case can end must be judged exactly as by the harness
the program carries itself (other backends, older interpreters), and a sandbox that lacks the module
despite the backend's promise must still be graded right (the program says ``nolib``; the judge runs the
carried harness).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from test_isolated_inline import HEADER, PROGRAMS, TIMEOUT_S

from sandboxkit import SandboxPool
from sandboxkit.judge import AssertCase, grade
from sandboxkit.judge import isolated as isolated_module
from sandboxkit.judge.isolated import build_isolated_harness, library, warm_module
from support.judge import FAST, RecordingBackend, needs_subprocess

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
    try:
        async with SandboxPool(backend, max_concurrency=2, limits=FAST) as p:
            yield p, backend
    finally:
        await backend.aclose()


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
    assert len(scripts) == 4  # each problem twice: the short program (``nolib``), then the whole harness
    assert [library()[0] in s for s in scripts] == [True, False, True, False]
