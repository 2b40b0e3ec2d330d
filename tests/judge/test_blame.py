"""Blame: what a graded program can cause is its own outcome (a number), never ``infra_error``/``None``.

Each attack here once turned a wrong program's 0 into "no reward" (TRL leaves a ``None`` out of the
group, so a policy learns to reach it). They are graded through ``grade`` on the subprocess backend and
on Docker, and through the TRL and verl reward adapters, and must each end with a number.
"""

from __future__ import annotations

import json

import anyio
import pytest

from judge.test_checkers import EXAMPLE_CHECKER, GARBAGE, SUM_CASES
from judge.test_interactive import (
    CRASHES_ON_GARBAGE,
    PLANTS_A_SITE_HOOK,
    PY_INTERACTOR,
    SWAPS_THE_INTERACTOR,
    suite,
)
from sandboxkit import Limits, RunRequest, RunResult, Sandbox, SandboxPool
from sandboxkit.errors import SandboxCrashed
from sandboxkit.integrations.trl import SandboxReward
from sandboxkit.integrations.verl import compute_score
from sandboxkit.judge import grade
from support.judge import FAST, RecordingBackend, needs_gpp, needs_java, needs_subprocess, pool_over

pytestmark = needs_subprocess

#: A compiled stdio solution that answers right, then kills its fork server on the case whose input is 1.
KILLS_ITS_SANDBOX = """```cpp
#include <csignal>
#include <cstdio>
#include <unistd.h>
int main() {
    int n;
    if (scanf("%d", &n) != 1) return 1;
    printf("%d\\n", n + 1);
    fflush(stdout);
    if (n == 1) { kill(getppid(), SIGKILL); KILL_ALL }
    return 0;
}
```"""
ADD_ONE = [{"stdin": f"{n}\n", "expected_stdout": f"{n + 1}\n"} for n in (0, 1, 2)]


def killer(kill_all: bool) -> str:
    return KILLS_ITS_SANDBOX.replace("KILL_ALL", "kill(-1, SIGKILL);" if kill_all else "")


@needs_gpp
@pytest.mark.parametrize("kill_all", [False, True], ids=["kill-parent", "kill-all"])
async def test_a_program_that_kills_its_sandbox_fails_that_case_and_grading_goes_on(
    pool: SandboxPool, kill_all: bool
) -> None:
    # Was: the next case's run raised SandboxCrashed and the whole verdict was infra_error (None).
    verdict = await grade(pool, killer(kill_all), ADD_ONE, language="cpp")
    assert [c.status for c in verdict.cases] == ["passed", "error", "passed"], verdict
    assert (verdict.status, verdict.reward, verdict.infra_error) == ("failed", pytest.approx(2 / 3), False)
    strict = await grade(pool, killer(kill_all), ADD_ONE, language="cpp", shaping="all_or_nothing")
    assert (strict.status, strict.reward) == ("failed", 0.0), strict
    assert [c.status for c in strict.cases] == ["passed", "error", "skipped"]


@needs_gpp
async def test_a_program_that_kills_its_sandbox_in_every_case_scores_zero(pool: SandboxPool) -> None:
    always = killer(True).replace("if (n == 1) ", "")
    verdict = await grade(pool, always, ADD_ONE, language="cpp")
    assert (verdict.status, verdict.reward) == ("failed", 0.0), verdict
    assert [c.status for c in verdict.cases] == ["error"] * 3


class DiesAtOnce(RecordingBackend):
    """The real backend, but every sandbox dies on its first run: no program of it ever comes back."""

    async def open(self, limits: Limits | None = None) -> Sandbox:
        sandbox = await super().open(limits)

        async def run(request: RunRequest) -> RunResult:
            raise SandboxCrashed("the sandbox died (injected)", backend=self.name, sandbox_id=sandbox.id)

        sandbox.run = run  # type: ignore[method-assign]
        return sandbox


@needs_gpp
async def test_sandboxes_that_die_before_the_program_comes_back_are_an_infra_error() -> None:
    # The other side of the rule: a crash raised by the program's first command in a fresh session is
    # the sandbox's. A right program must not get a 0 (nor the judge loop over fresh sessions).
    async with pool_over(DiesAtOnce(), 2) as pool:
        right = '```cpp\n#include <cstdio>\nint main() { int n; scanf("%d", &n); printf("%d\\n", n + 1); }\n```'
        verdict = await grade(pool, right, ADD_ONE, language="cpp")
        interactive = await grade(pool, right, suite(), language="cpp")
    assert (verdict.status, verdict.reward) == ("infra_error", None), verdict
    assert (interactive.status, interactive.reward) == ("infra_error", None), interactive


@pytest.mark.docker
async def test_on_docker_a_program_that_kills_its_parent_gets_a_number(docker_pool: SandboxPool) -> None:
    verdict = await grade(docker_pool, killer(True), ADD_ONE, language="cpp")
    assert verdict.reward is not None and not verdict.infra_error, verdict


#: Values a solution may return that the isolated checker cannot carry as data (each was a handle, then
#: cannot_isolate, then infra_error, reward None): comparing any of them fails the case.
NOT_CARRIED = {
    "self-referencing list": "a = []\n    a.append(a)\n    return a",
    "self-referencing dict": "a = {}\n    a['a'] = a\n    return a",
    "100k-deep list": "a = []\n    for _ in range(100_000):\n        a = [a]\n    return a",
    "100k-deep dict": "a = {}\n    for _ in range(100_000):\n        a = {'k': a}\n    return a",
    "object()": "return object()",
    "generator": "return (i for i in range(x))",
}


@pytest.mark.parametrize("cases", [1, 2], ids=["inline", "forked"])
@pytest.mark.parametrize("name", list(NOT_CARRIED))
async def test_a_value_the_codec_cannot_carry_fails_the_case(pool: SandboxPool, name: str, cases: int) -> None:
    code = f"```python\ndef f(x):\n    {NOT_CARRIED[name]}\n```"
    tests = [{"type": "assert", "code": f"assert f({n}) == [{n}]"} for n in (1, 2)][:cases]
    verdict = await grade(pool, code, tests)
    assert (verdict.status, verdict.reward, verdict.infra_error) == ("failed", 0.0, False), verdict
    assert "not plain data" in verdict.cases[0].message, verdict.cases[0]


async def test_a_returned_generator_the_test_only_iterates_still_passes(pool: SandboxPool) -> None:
    code = "```python\ndef f(x):\n    return (i for i in range(x))\n```"
    verdict = await grade(pool, code, [{"type": "assert", "code": "assert list(f(3)) == [0, 1, 2]"}])
    assert verdict.status == "ok", verdict


@pytest.mark.docker
async def test_on_docker_a_value_the_codec_cannot_carry_fails_the_case(docker_pool: SandboxPool) -> None:
    for name in ("self-referencing list", "100k-deep list", "object()"):
        code = f"```python\ndef f(x):\n    {NOT_CARRIED[name]}\n```"
        verdict = await grade(docker_pool, code, [{"type": "assert", "code": "assert f(1) == [1]"}])
        assert (verdict.status, verdict.reward) == ("failed", 0.0), (name, verdict)


@needs_gpp
async def test_a_completion_that_is_not_valid_unicode_is_a_compile_error(pool: SandboxPool) -> None:
    # Was (C++): the backend refused to write main.cpp, InvalidRequest -> invalid -> None.
    for language in ("cpp", "python"):
        code = f"```{language}\n// \ud800\nint main() {{ return 0; }}\n```"
        verdict = await grade(pool, code, ADD_ONE[:2], language=language)
        assert (verdict.status, verdict.reward) == ("compile_error", 0.0), verdict
        assert "not valid Unicode text" in (verdict.error or "")


@needs_java
async def test_a_java_class_name_longer_than_a_file_name_is_a_compile_error(pool: SandboxPool) -> None:
    # Was: the file name Main's class gives could not be written, InvalidRequest -> invalid -> None.
    code = "```java\npublic class " + "A" * 300 + " { public static void main(String[] a) {} }\n```"
    verdict = await grade(pool, code, ADD_ONE[:1], language="java")
    assert (verdict.status, verdict.reward) == ("compile_error", 0.0), verdict


def attacks() -> dict[str, tuple[str, object, str]]:
    """Every attack of this file and its neighbours as ``(completion, tests, language)``: each was ``None``."""
    return {
        "checker chokes on garbage (item 9)": (GARBAGE, {"cases": SUM_CASES, "checker": EXAMPLE_CHECKER}, "python"),
        "kills its sandbox (item 10)": (killer(True), ADD_ONE, "cpp"),
        "returns object() to an isolated assert (item 8)": (
            "```python\ndef f(x):\n    return object()\n```",
            [{"type": "assert", "code": "assert f(1) == [1]"}],
            "python",
        ),
        "swaps the interactor (item 5, a forged 1.0 before)": (SWAPS_THE_INTERACTOR, suite(), "cpp"),
        "not valid Unicode": ("```cpp\n// \ud800\nint main() {}\n```", ADD_ONE, "cpp"),
        "plants a site hook for the interactor (a forged 2/3 before)": (
            PLANTS_A_SITE_HOOK,
            suite("python", PY_INTERACTOR),
            "python",
        ),
        "crashes the interactor with garbage": (
            "```python\nprint('abc', flush=True)\n```",
            suite("python", CRASHES_ON_GARBAGE),
            "python",
        ),
    }


@needs_gpp
async def test_every_attack_ends_with_a_number_through_trl_and_verl() -> None:
    named = attacks()
    completions = [c for c, _, _ in named.values()]
    with SandboxReward("subprocess", max_concurrency=2, limits=FAST, shaping="all_or_nothing") as reward:
        rewards = await reward(
            prompts=["p"] * len(named),
            completions=completions,
            tests=[json.dumps(t) for _, t, _ in named.values()],
            language=[lang for _, _, lang in named.values()],
        )
    assert dict(zip(named, rewards, strict=True)) == dict.fromkeys(named, 0.0)
    for name, (completion, tests, language) in named.items():
        scored = await compute_score(
            "x", completion, json.dumps(tests), language=language, timeout=5, shaping="all_or_nothing"
        )
        assert (scored["score"], scored["status"] in ("failed", "compile_error")) == (0.0, True), (name, scored)


#: Six cases of a compiled stdio problem: they run one after another in one session.
SIX_SUMS = [{"stdin": f"{n} {n}\n", "expected_stdout": f"{2 * n}\n"} for n in range(6)]
SPINS = "```c\nint main(void) { for (;;); }\n```"
SUMS = '```c\n#include <stdio.h>\nint main(void) { int a, b; scanf("%d %d", &a, &b); printf("%d\\n", a + b); }\n```'


async def test_a_program_whose_timeouts_use_up_the_deadline_is_charged_the_rest(pool: SandboxPool) -> None:
    # Was: six 1 s timeouts one after another ran past the adapter's 4 s deadline, which gave None.
    verdict = await grade(pool, SPINS, SIX_SUMS, language="c", limits=Limits(timeout_s=1), deadline_s=4.0)
    assert (verdict.status, verdict.reward, verdict.infra_error) == ("timeout", 0.0, False), verdict
    assert all(c.status == "timeout" for c in verdict.cases), verdict.cases
    unrun = [c for c in verdict.cases if (c.message or "").startswith("not run")]
    assert 1 <= len(unrun) <= 4, verdict.cases  # some ran and timed out; the rest were charged unrun
    assert verdict.duration_s < 4.0


async def test_a_right_program_is_never_charged_for_a_short_deadline(pool: SandboxPool) -> None:
    # Its runs never time out, so none of the missing time is its doing: every case runs and passes
    # (the caller's own deadline, not the judge, decides what a slow sandbox gets).
    verdict = await grade(pool, SUMS, SIX_SUMS, language="c", limits=Limits(timeout_s=1), deadline_s=0.001)
    assert (verdict.status, verdict.reward) == ("ok", 1.0), verdict


async def test_verl_charges_a_program_whose_timeouts_use_up_its_deadline() -> None:
    scored = await compute_score("x", SPINS, json.dumps(SIX_SUMS), language="c", timeout=1, deadline_s=4.0)
    assert (scored["score"], scored["status"]) == (0.0, "timeout"), scored


class SlowSandboxes(RecordingBackend):
    """The real backend, but each run waits 1 s before it starts: a busy host, nothing the program did."""

    async def open(self, limits: Limits | None = None) -> Sandbox:
        sandbox = await super().open(limits)
        real = sandbox.run

        async def run(request: RunRequest) -> RunResult:
            await anyio.sleep(1.0)
            return await real(request)

        sandbox.run = run  # type: ignore[method-assign]
        return sandbox


async def test_a_right_program_on_a_slow_sandbox_past_the_deadline_gets_none_not_zero() -> None:
    # The other side of the deadline rule: the time went to the sandbox, so the program is not charged.
    with SandboxReward(SlowSandboxes(), deadline_s=3.0, limits=Limits(timeout_s=1), language="c") as reward:
        rewards = await reward(prompts=["p"], completions=[SUMS], tests=[json.dumps(SIX_SUMS)])
        assert rewards == [None]
        assert reward.last_verdicts == [None]
