"""Special judges end to end on the real subprocess backend: built-in, Python-function and program checkers.

The problem used throughout has many right answers: "print two integers that sum to N". Exact
output matching would reject every valid answer but one; a checker accepts them all.
"""

from __future__ import annotations

import pytest

from sandboxkit import Limits, SandboxPool
from sandboxkit.judge import grade
from sandboxkit.judge.cases import InvalidTests
from sandboxkit.judge.checkers import parse_checker
from support.judge import FAST, needs_gpp, needs_subprocess

pytestmark = needs_subprocess

#: Any split of N: "0 N", "N 0", ... all valid. The expected output in the tests is just one of them.
SUM_CASES = [{"stdin": f"{n}\n", "expected_stdout": f"0 {n}\n"} for n in (5, 12, 40)]
ZERO_FIRST = "```python\nn = int(input())\nprint(0, n)\n```"
HALVES = "```python\nn = int(input())\nprint(n // 2, n - n // 2)\n```"
WRONG = "```python\nn = int(input())\nprint(n, n)\n```"
CRASH = "```python\nraise SystemExit(4)\n```"

CPP_CHECKER = r"""
#include <fstream>
#include <iostream>
int main(int argc, char** argv) {
    if (argc < 4) { std::cerr << "usage: checker input output answer\n"; return 3; }
    std::ifstream in(argv[1]), out(argv[2]);
    long long n, a, b;
    if (!(in >> n)) { std::cerr << "bad input file\n"; return 3; }
    if (!(out >> a >> b)) { std::cerr << "expected two integers\n"; return 2; }
    std::string extra;
    if (out >> extra) { std::cerr << "extra output: " << extra << "\n"; return 1; }
    if (a + b != n) { std::cerr << "wrong answer: " << a << " + " << b << " != " << n << "\n"; return 1; }
    return 0;
}
"""

PY_CHECKER = """
def check(input, output, answer):
    n = int(input.split()[0])
    parts = output.split()
    if len(parts) != 2:
        return False
    a, b = map(int, parts)
    if a + b != n:
        return 0.0
    return 1.0 if a == 0 else 0.5   # partial credit: the judges prefer the answer with a zero
"""


@pytest.fixture
async def pool() -> SandboxPool:  # type: ignore[misc]
    async with SandboxPool("subprocess", max_concurrency=4, limits=FAST) as p:
        yield p


async def test_float_tolerance_checker(pool: SandboxPool) -> None:
    tests = {"cases": [{"stdin": "3\n", "expected_stdout": "0.333333333\n"}], "checker": {"type": "float", "tol": 1e-6}}
    close = "```python\nn = int(input())\nprint(f'{1 / n:.7f}')\n```"
    far = "```python\nn = int(input())\nprint(f'{1 / n:.3f}')\n```"
    assert (await grade(pool, close, tests)).status == "ok"
    assert (await grade(pool, far, tests)).status == "failed"
    # Without the checker, 0.3333333 is not 0.333333333.
    assert (await grade(pool, close, tests["cases"])).status == "failed"


async def test_tokens_checker_ignores_layout(pool: SandboxPool) -> None:
    tests = [{"stdin": "", "expected_stdout": "1 2\n3\n"}]
    code = "```python\nprint('1\\n2   3')\n```"
    assert (await grade(pool, code, tests)).status == "failed"
    assert (await grade(pool, code, tests, checker="tokens")).status == "ok"


@needs_gpp
async def test_cpp_checker_accepts_every_valid_answer(pool: SandboxPool) -> None:
    tests = {"cases": SUM_CASES, "checker": {"type": "program", "language": "cpp", "code": CPP_CHECKER}}
    for code in (ZERO_FIRST, HALVES):
        verdict = await grade(pool, code, tests, limits=Limits(timeout_s=5, memory_mb=1024))
        assert (verdict.status, verdict.passed, verdict.reward) == ("ok", 3, 1.0), verdict
    wrong = await grade(pool, WRONG, tests, limits=Limits(timeout_s=5, memory_mb=1024))
    assert (wrong.status, wrong.passed, wrong.reward) == ("failed", 0, 0.0), wrong
    assert "wrong answer: 5 + 5 != 5" in wrong.cases[0].message
    # A crashing solution never reaches the checker.
    crash = await grade(pool, CRASH, tests, limits=Limits(timeout_s=5, memory_mb=1024))
    assert (crash.status, crash.reward, crash.cases[0].status) == ("failed", 0.0, "error")
    # Without the checker only the one answer written in the tests passes.
    assert (await grade(pool, HALVES, SUM_CASES)).passed == 0
    # With no expected output at all, the checker judges from the input alone (an empty answer file).
    no_answer = {"cases": [{"stdin": c["stdin"]} for c in SUM_CASES], "checker": tests["checker"]}
    assert (await grade(pool, WRONG, no_answer, limits=Limits(timeout_s=5, memory_mb=1024))).status == "failed"
    assert (await grade(pool, HALVES, no_answer, limits=Limits(timeout_s=5, memory_mb=1024))).status == "ok"


async def test_python_function_checker_with_partial_credit(pool: SandboxPool) -> None:
    tests = {"cases": SUM_CASES, "checker": {"type": "python", "code": PY_CHECKER}}
    assert (await grade(pool, ZERO_FIRST, tests)).reward == 1.0
    halves = await grade(pool, HALVES, tests)
    assert (halves.status, halves.passed, halves.reward) == ("failed", 0, pytest.approx(0.5)), halves
    assert [c.score for c in halves.cases] == [0.5, 0.5, 0.5]
    assert (await grade(pool, WRONG, tests)).reward == 0.0


BROKEN_CHECKERS = {
    "python raises": {"type": "python", "code": "def check(input, output, answer):\n    return 1 / 0\n"},
    "python loops": {
        "type": "python",
        "code": "def check(i, o, a):\n    while True:\n        pass\n",
        "timeout_s": 0.5,
    },
    "program crashes": {"type": "program", "language": "bash", "code": "kill -SEGV $$"},
    "program reports failure (testlib exit 3)": {"type": "program", "language": "bash", "code": "exit 3"},
    "program times out": {"type": "program", "language": "bash", "code": "while :; do :; done", "timeout_s": 0.5},
    "program does not compile": {"type": "program", "language": "cpp", "code": "int main( {"},
}


@pytest.mark.parametrize("name", list(BROKEN_CHECKERS))
async def test_a_broken_checker_is_flagged_never_scored(pool: SandboxPool, name: str) -> None:
    tests = {"cases": SUM_CASES[:2], "checker": BROKEN_CHECKERS[name]}
    for code in (ZERO_FIRST, WRONG):  # neither a right nor a wrong solution may get a score
        verdict = await grade(pool, code, tests, shaping="pass_rate,failed=-1")
        assert (verdict.status, verdict.reward, verdict.infra_error) == ("infra_error", None, True), verdict
        assert verdict.error is not None and "checker" in verdict.error


def test_checker_specs_are_validated() -> None:
    assert parse_checker("tokens") is not None and parse_checker(None) is None
    with pytest.raises(InvalidTests, match="'diff' is not 'tokens' or 'float'"):
        parse_checker("diff")
    with pytest.raises(InvalidTests, match="needs its source in 'code'"):
        parse_checker({"type": "program", "language": "cpp"})
    with pytest.raises(InvalidTests, match="unknown language 'cobol'"):
        parse_checker({"type": "program", "language": "cobol", "code": "x"})


async def test_a_bad_checker_spec_is_an_invalid_verdict(pool: SandboxPool) -> None:
    verdict = await grade(pool, ZERO_FIRST, {"cases": SUM_CASES, "checker": "fuzzy"})
    assert (verdict.status, verdict.reward) == ("invalid", None)
    assert verdict.error is not None and "fuzzy" in verdict.error


#: The project's own example checker (examples/problems.jsonl, "any_split_checker"): ``int`` raises on garbage.
EXAMPLE_CHECKER = {
    "type": "python",
    "code": "def check(input, output, answer):\n    n = int(input)\n    parts = output.split()\n"
    "    return len(parts) == 2 and int(parts[0]) + int(parts[1]) == n\n",
}
GARBAGE = "```python\nprint('x y')\n```"


async def test_a_checker_raising_on_the_solutions_output_is_a_wrong_answer(pool: SandboxPool) -> None:
    # Was checker_failed -> infra_error -> None: printing garbage the checker chokes on dodged the 0.
    verdict = await grade(pool, GARBAGE, {"cases": SUM_CASES, "checker": EXAMPLE_CHECKER})
    assert (verdict.status, verdict.reward, verdict.passed) == ("failed", 0.0, 0), verdict
    assert [c.status for c in verdict.cases] == ["wrong_answer"] * 3
    assert "the checker raised on this output: ValueError" in verdict.cases[0].message
    # Without a reference answer there is nothing to blame but the output: still a wrong answer.
    no_answer = {"cases": [{"stdin": c["stdin"]} for c in SUM_CASES], "checker": EXAMPLE_CHECKER}
    assert (await grade(pool, GARBAGE, no_answer)).reward == 0.0
    # A right solution is unaffected, and a checker that raises on the reference answer is still broken.
    assert (await grade(pool, ZERO_FIRST, {"cases": SUM_CASES, "checker": EXAMPLE_CHECKER})).reward == 1.0
    picky = {"type": "python", "code": "def check(i, o, a):\n    assert o.split()[0] == 'zero'\n    return True\n"}
    broken = await grade(pool, ZERO_FIRST, {"cases": SUM_CASES, "checker": picky})
    assert (broken.status, broken.reward) == ("infra_error", None), broken
    assert "raises on the reference answer too" in (broken.error or "")


#: Checkers that stop (a loop, a crash) only on an output that is not two numbers: the reference passes.
CHOKING_CHECKERS = {
    "python loops": {
        "type": "python",
        "timeout_s": 1,
        "code": "def check(i, o, a):\n    while not o.split()[0].isdigit():\n        pass\n"
        "    return sum(map(int, o.split())) == int(i)\n",
    },
    "program crashes": {
        "type": "program",
        "language": "bash",
        "code": 'read n < "$1"; read a b < "$2"\n[[ "$a$b" =~ ^[0-9]+$ ]] || kill -SEGV $$\n'
        "[ $((a + b)) -eq $n ] || exit 1\n",
    },
    "program times out": {
        "type": "program",
        "language": "bash",
        "timeout_s": 1,
        "code": 'read n < "$1"; read a b < "$2"\n[[ "$a$b" =~ ^[0-9]+$ ]] || while :; do :; done\n'
        "[ $((a + b)) -eq $n ] || exit 1\n",
    },
}


@pytest.mark.parametrize("name", list(CHOKING_CHECKERS))
async def test_a_checker_stopping_on_the_solutions_output_is_a_wrong_answer(pool: SandboxPool, name: str) -> None:
    # The first case's output chokes the checker, the others are right: the stop is that case's wrong
    # answer (the checker accepts its reference answer) and the other cases are still judged.
    tests = {"cases": SUM_CASES, "checker": CHOKING_CHECKERS[name]}
    code = "```python\nn = int(input())\nprint('x y' if n == 5 else f'0 {n}')\n```"
    verdict = await grade(pool, code, tests)
    assert [c.status for c in verdict.cases] == ["wrong_answer", "passed", "passed"], verdict
    assert verdict.reward == pytest.approx(2 / 3) and not verdict.infra_error
    assert "the checker failed on this output" in verdict.cases[0].message
    assert "accepts the reference answer" in verdict.cases[0].message


@pytest.mark.docker
async def test_on_docker_a_checker_choking_on_the_output_is_a_wrong_answer(docker_pool: SandboxPool) -> None:
    garbage = await grade(docker_pool, GARBAGE, {"cases": SUM_CASES, "checker": EXAMPLE_CHECKER})
    assert (garbage.status, garbage.reward) == ("failed", 0.0), garbage
    tests = {"cases": SUM_CASES, "checker": CHOKING_CHECKERS["program crashes"]}
    code = "```python\nn = int(input())\nprint('x y' if n == 5 else f'0 {n}')\n```"
    crashed = await grade(docker_pool, code, tests)
    assert [c.status for c in crashed.cases] == ["wrong_answer", "passed", "passed"], crashed


async def test_a_checker_that_prints_the_output_cannot_be_fed_forged_reports(pool: SandboxPool) -> None:
    # A checker that prints what it judges (debugging) used to print the solution's forged report lines
    # onto the channel its results travel on: a wrong solution passed the cases judged before its last.
    chatty = {"type": "python", "code": "def check(i, o, a):\n    print(o)\n    return o.split() == a.split()\n"}
    forge = "".join(f'print(\'@@sandboxkit-check@@ {{"i": {i}, "score": 1.0}}\')\n' for i in range(3))
    verdict = await grade(pool, f"```python\n{forge}```", {"cases": SUM_CASES, "checker": chatty})
    assert (verdict.passed, verdict.reward) == (0, 0.0), verdict
