"""``grade`` end to end on the real subprocess backend: verdicts, batching, bad input, infrastructure failure."""

from __future__ import annotations

import json

import anyio
import pytest

from sandboxkit import SandboxPool
from sandboxkit.judge import Verdict, grade, grade_many
from support.judge import RecordingBackend, needs_gpp, needs_java, needs_node, needs_subprocess

pytestmark = needs_subprocess

ADD = "```python\ndef add(a, b):\n    return a + b\n```"
A_PLUS_B = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
BASH_A_PLUS_B = "```bash\nread -r a b\necho $((a + b))\n```"
CPP_A_PLUS_B = '```cpp\n#include <iostream>\nint main(){long long a,b; std::cin>>a>>b; std::cout<<a+b<<"\\n";}\n```'
STDIO = [{"stdin": f"{i} {i}\n", "expected_stdout": f"{2 * i}\n"} for i in range(4)]


def keys(verdict: Verdict) -> list[str]:
    return list(verdict.to_dict())


async def test_stdio_pass_rate_and_first_failure_message(pool: SandboxPool) -> None:
    tests = [*STDIO[:2], {"stdin": "1 1\n", "expected_stdout": "3\n"}]
    verdict = await grade(pool, A_PLUS_B, tests)
    assert (verdict.status, verdict.passed, verdict.total, verdict.reward) == ("failed", 2, 3, pytest.approx(2 / 3))
    assert [c.status for c in verdict.cases] == ["passed", "passed", "wrong_answer"]
    assert verdict.error == "case 2 (stdio) wrong_answer: line 1: expected '3', got '2'"
    assert verdict.extraction == "fenced"


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("    raise ValueError('no')", "ValueError"),
        ("    import sys; sys.exit(0)", "sys.exit(0)"),
        ("    import os; os._exit(0)", "exited (code 0)"),
        ("    import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "signal 11"),
    ],
)
async def test_crash_in_call_harness_fails_even_when_the_expected_output_is_empty(
    pool: SandboxPool, body: str, what: str
) -> None:
    # verl's wrapper lets a crashing function pass when the expected output is empty; here it fails.
    completion = f"```python\ndef f(x):\n{body}\n```"
    for tests in (
        [{"type": "call", "fn_name": "f", "args": [1], "expected": ""}],
        {"fn_name": "f", "inputs": ["1"], "outputs": [""]},
        [{"type": "assert", "code": "f(1)"}],
    ):
        verdict = await grade(pool, completion, tests)
        assert verdict.status == "failed" and verdict.reward == 0.0, verdict
        assert verdict.cases[0].status == "error" and what in verdict.cases[0].message


async def test_one_case_timeout_does_not_hide_the_others(recording: tuple[SandboxPool, RecordingBackend]) -> None:
    pool, backend = recording
    completion = "```python\ndef f(x):\n    while x == 2:\n        pass\n    return x * 10\n```"
    tests = [{"type": "call", "fn_name": "f", "args": [i], "expected": i * 10} for i in range(4)]
    verdict = await grade(pool, completion, tests, timeout_s=1)
    assert [c.status for c in verdict.cases] == ["passed", "passed", "timeout", "passed"]
    assert (verdict.status, verdict.passed, verdict.reward) == ("timeout", 3, 0.75)
    assert len(backend.runs()) == 1  # all four cases in one sandbox run


async def test_all_or_nothing_stops_at_the_first_failure(recording: tuple[SandboxPool, RecordingBackend]) -> None:
    pool, backend = recording
    tests = [STDIO[0], {"stdin": "1 1\n", "expected_stdout": "3\n"}, *STDIO[1:]]
    verdict = await grade(pool, BASH_A_PLUS_B, tests, language="bash", shaping="all_or_nothing")
    assert [c.status for c in verdict.cases] == ["passed", "wrong_answer", "skipped", "skipped", "skipped"]
    assert (verdict.reward, len(backend.runs())) == (0.0, 2)
    # Python cases share one harness run; it stops at the first case that errors, crashes or times out.
    crash = "```python\ndef f(x):\n    if x == 1:\n        raise KeyError(x)\n    return x\n```"
    calls = [{"type": "call", "fn_name": "f", "args": [i], "expected": i} for i in range(4)]
    verdict = await grade(pool, crash, calls, shaping="all_or_nothing")
    assert [c.status for c in verdict.cases] == ["passed", "error", "skipped", "skipped"]
    assert len(backend.runs()) == 3


async def test_the_three_verl_ground_truth_shapes(pool: SandboxPool) -> None:
    stdio = json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})
    call = json.dumps({"fn_name": "add", "inputs": ["1\n2", "[1]\n[2]"], "outputs": ["3", "[1, 2]"]})
    asserts = {"assert_case": ["assert add(1, 2) == 3", "assert add('a', 'b') == 'ab'"]}
    for completion, truth in ((A_PLUS_B, stdio), (ADD, call), (ADD, asserts), (ADD, json.loads(call))):
        verdict = await grade(pool, completion, truth)
        assert (verdict.status, verdict.reward) == ("ok", 1.0), (truth, verdict)
    wrong = "```python\ndef add(a, b):\n    return a\n```"
    assert (await grade(pool, wrong, call)).passed == 0
    assert (await grade(pool, wrong, asserts)).passed == 0


async def test_apps_wrapped_outputs_and_leetcode_classes(pool: SandboxPool) -> None:
    leet = "```python\nclass Solution:\n    def twoSum(self, nums: List[int], t: int) -> List[int]:\n        return [0, 1]\n```"
    truth = {"fn_name": "twoSum", "inputs": [[[2, 7], 9]], "outputs": [[[0, 1]]]}  # APPS wraps the value in a list
    assert (await grade(pool, leet, truth)).status == "ok"


async def test_sandbox_fusion_provided_data(pool: SandboxPool) -> None:
    tests = {"test": [{"input": {"stdin": "2 2\n"}, "output": {"stdout": "4\n"}}]}
    assert (await grade(pool, A_PLUS_B, tests)).status == "ok"


async def test_comparison_options_reach_the_verdict(pool: SandboxPool) -> None:
    code = "```python\nprint(' 1.0000001   2 ')\n```"
    tests = [{"stdin": "", "expected_stdout": "1 2\n"}]
    assert (await grade(pool, code, tests)).status == "failed"
    assert (await grade(pool, code, tests, compare={"whitespace": "all", "float_tol": 1e-6})).status == "ok"
    suite = {"cases": tests, "compare": {"whitespace": "all", "float_tol": 1e-6}}
    assert (await grade(pool, code, suite)).status == "ok"


async def test_python_syntax_error_is_a_compile_error(pool: SandboxPool) -> None:
    for tests in (STDIO[:2], [{"type": "call", "fn_name": "f", "args": [], "expected": 1}]):
        verdict = await grade(
            pool, "```python\ndef f(:\n    return 1\n```", tests, shaping="pass_rate,compile_error=-1"
        )
        assert (verdict.status, verdict.reward) == ("compile_error", -1.0)
        assert verdict.error is not None and "SyntaxError" in verdict.error
    # A SyntaxError raised at run time by the program itself is a runtime failure, not a compile error.
    runtime = "```python\ncompile('def (', 'x', 'exec')\n```"
    assert (await grade(pool, runtime, STDIO[:1])).status == "failed"


async def test_memory_limit_in_the_harness(pool: SandboxPool) -> None:
    from sandboxkit import Limits

    hog = "```python\ndef f():\n    return len(b'x' * (3 << 30))\nif __name__ == '__main__':\n    print(f())\n```"
    small = Limits(timeout_s=5, memory_mb=256)
    for tests in ([{"type": "call", "fn_name": "f", "expected": 1}], [{"stdin": "", "expected_stdout": "1"}]):
        verdict = await grade(pool, hog, tests, limits=small)
        assert verdict.status == "memory_exceeded", verdict


@needs_gpp
async def test_compiled_stdio_compiles_once(recording: tuple[SandboxPool, RecordingBackend]) -> None:
    pool, backend = recording
    verdict = await grade(pool, CPP_A_PLUS_B, STDIO, language="cpp")
    assert (verdict.status, verdict.passed) == ("ok", 4)
    assert len(backend.runs("cpp")) == 1  # compiled once; the other cases run the binary
    assert len(backend.runs()) == 4
    broken = await grade(pool, "```cpp\nint main( {}\n```", STDIO, language="cpp", shaping="pass_rate,compile_error=-1")
    assert (broken.status, broken.reward, [c.status for c in broken.cases]) == (
        "compile_error",
        -1.0,
        ["compile_error"] * 4,
    )
    assert len(backend.runs("cpp")) == 2  # a broken program is compiled once too


@needs_gpp
async def test_compiled_timeout_and_crash(pool: SandboxPool) -> None:
    loop = "```cpp\nint main(){ volatile int x = 0; while (true) x++; }\n```"
    verdict = await grade(pool, loop, STDIO[:2], language="cpp", timeout_s=1, shaping="pass_rate,timeout=-1")
    assert (verdict.status, verdict.reward) == ("timeout", -1.0)
    crash = "```cpp\n#include <cstdlib>\nint main(){ std::abort(); }\n```"
    verdict = await grade(pool, crash, STDIO[:2], language="cpp")
    assert verdict.status == "failed" and "signal" in verdict.cases[0].message


@needs_java
async def test_java(pool: SandboxPool) -> None:
    java = (
        "```java\nimport java.util.*;\npublic class Main { public static void main(String[] a) {"
        " Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + s.nextLong()); } }\n```"
    )
    verdict = await grade(pool, java, STDIO[:2], language="java")
    assert (verdict.status, verdict.passed) == ("ok", 2), verdict


@needs_node
async def test_assert_cases_in_another_language(pool: SandboxPool) -> None:
    js = "```javascript\nfunction add(a, b) { return a + b; }\n```"
    tests = [
        {"type": "assert", "code": "if (add(1, 2) !== 3) process.exit(1);"},
        {"type": "assert", "code": "throw 1;"},
    ]
    verdict = await grade(pool, js, tests, language="js")
    assert [c.status for c in verdict.cases] == ["passed", "error"]


async def test_banned_patterns_are_checked_before_anything_runs(
    recording: tuple[SandboxPool, RecordingBackend],
) -> None:
    pool, backend = recording
    code = "```python\nimport os\nprint(sorted([2, 1]))\n```"
    for patterns, found in ((["sorted("], "'sorted(' found on line 2"), (["re:^import\\s+os"], "line 1")):
        verdict = await grade(pool, code, STDIO[:1], banned_patterns=patterns, shaping="pass_rate,banned=-1")
        assert (verdict.status, verdict.reward, verdict.cases) == ("banned", -1.0, [])
        assert verdict.error is not None and found in verdict.error
    assert backend.log == []
    assert (await grade(pool, code, STDIO[:1], banned_patterns=["re:^import\\s+sys"])).status == "failed"


async def test_no_code(pool: SandboxPool) -> None:
    verdict = await grade(pool, [{"role": "assistant", "content": "```python\n```"}], STDIO[:2])
    assert (verdict.status, verdict.reward, verdict.total, verdict.extraction) == ("no_code", 0.0, 2, "empty")


async def test_invalid_tests_give_a_clear_error_and_no_reward(pool: SandboxPool) -> None:
    for tests, message in (
        ([{"type": "fuzz"}], "unknown test type 'fuzz'"),
        (None, "no tests given"),
        ("[oops", "not valid JSON"),
    ):
        verdict = await grade(pool, ADD, tests)
        assert (verdict.status, verdict.reward, verdict.infra_error) == ("invalid", None, False)
        assert verdict.error is not None and message in verdict.error
    call_in_cpp = await grade(pool, CPP_A_PLUS_B, [{"type": "call", "fn_name": "f", "expected": 1}], language="cpp")
    assert call_in_cpp.status == "invalid" and "call cases run Python" in (call_in_cpp.error or "")
    assert (await grade(pool, ADD, STDIO, language="cobol")).status == "invalid"
    assert (await grade(pool, ADD, STDIO, shaping="best_of_n")).status == "invalid"


async def test_infrastructure_failure_gives_no_reward(broken_pool: SandboxPool) -> None:
    verdict = await grade(broken_pool, ADD, [{"type": "call", "fn_name": "add", "args": [1, 2], "expected": 3}])
    assert (verdict.status, verdict.reward, verdict.infra_error) == ("infra_error", None, True)
    assert verdict.error is not None and "service is down" in verdict.error
    penalized = await grade(broken_pool, A_PLUS_B, STDIO, shaping="pass_rate,failed=-1,timeout=-1")
    assert penalized.reward is None  # never a penalty


async def test_to_dict_has_the_same_keys_on_every_path(pool: SandboxPool, broken_pool: SandboxPool) -> None:
    verdicts = [
        await grade(pool, A_PLUS_B, STDIO[:1]),
        await grade(pool, "```python\nprint(0)\n```", STDIO[1:2]),
        await grade(pool, "", STDIO[:1]),
        await grade(pool, A_PLUS_B, STDIO[:1], banned_patterns=["map("]),
        await grade(pool, A_PLUS_B, {"bad": 1}),
        await grade(broken_pool, A_PLUS_B, STDIO[:1]),
    ]
    assert [v.status for v in verdicts] == ["ok", "failed", "no_code", "banned", "invalid", "infra_error"]
    assert all(keys(v) == keys(verdicts[0]) for v in verdicts)
    assert all(isinstance(v.to_dict()["error"], str) for v in verdicts)


async def test_grade_many_grades_every_row_in_order(pool: SandboxPool) -> None:
    rows = [
        {"id": "a", "completion": A_PLUS_B, "tests": STDIO[:2]},
        "not a row",
        {"id": "c", "completion": A_PLUS_B},
        {"id": "d", "completion": A_PLUS_B, "tests": [{"type": "nope"}]},
        {
            "id": "e",
            "completion": ADD,
            "tests": [{"fn_name": "add", "args": [1, 1], "expected": 2}],
            "shaping": "all_or_nothing",
        },
        {"id": "f", "completion": 42, "tests": STDIO},
    ]
    seen: list[int] = []
    verdicts = await grade_many(pool, rows, on_result=lambda i, v: seen.append(i))
    assert [v.status for v in verdicts] == ["ok", "invalid", "invalid", "invalid", "ok", "invalid"]
    assert "row must be a JSON object" in (verdicts[1].error or "")
    assert "row has no tests field" in (verdicts[2].error or "")
    assert "unknown test type 'nope'" in (verdicts[3].error or "")
    assert "completion must be a string" in (verdicts[5].error or "")
    assert sorted(seen) == list(range(len(rows)))


@needs_gpp
async def test_mixed_batch_on_a_small_pool_finishes() -> None:
    # Compile-once sessions hold sandboxes while pooled runs hold call slots; the judge keeps one sandbox out
    # of the sessions' reach, so a small pool under a mixed load still finishes (no lock-order deadlock).
    rows = []
    for _ in range(4):
        rows.append({"completion": CPP_A_PLUS_B, "tests": STDIO, "language": "cpp"})
        rows.append({"completion": A_PLUS_B, "tests": STDIO})
        rows.append({"completion": BASH_A_PLUS_B, "tests": STDIO, "language": "bash"})
    async with SandboxPool("subprocess", max_concurrency=2) as small:
        with anyio.fail_after(240):
            verdicts = await grade_many(small, rows, max_in_flight=8)
    assert [v.status for v in verdicts] == ["ok"] * len(rows)


async def test_session_opens_when_idle_sandboxes_fill_the_pool() -> None:
    # Pooled runs leave warm idle sandboxes holding every slot; a session (compile-once path) must still open.
    async with SandboxPool("subprocess", max_concurrency=2) as small:
        await grade(small, BASH_A_PLUS_B, STDIO[:2], language="bash")  # two cases, two pooled runs at once
        assert small.metrics()["sandboxes_idle"] == 2
        async with small.session() as session:
            assert (await session.run("print(5)")).stdout == "5\n"
