"""``isolate_asserts``: a wrong program cannot forge a pass on an assert case; right ones still pass.

Every program here is graded by a real subprocess-backed pool, in one sandbox run per problem (the
cases of a problem share the run). Each forge is shown twice: the plain harness (the test code in the
solution's own process) falls for it, the isolated one does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandboxkit import SandboxPool
from sandboxkit.judge import grade, grade_many
from sandboxkit.judge.isolated import build_isolated_harness, imports_of, spelled

FD_FORGE = """
import os
def f(x):
    # fd 3 is the plain harness's result pipe when the case runs in a forked child ("ok" is its success
    # payload; the rest is ignored), and its report channel when a problem's only case runs inline.
    mark = b"@@sandboxkit-case@@ "
    os.write(3, b"ok\\n" + mark + b"{'i': 0, 't': 0.0, 'cpu': 0.0, 'status': 'ok'}\\n" + mark + b"{'done': True}\\n")
    os._exit(0)
"""

#: Looks for any descriptor of any process it can reach (the harness's stdout, the checker's report
#: pipe) and writes success reports to all of them, then leaves before the test can fail.
PROC_FORGE = """
import os
def f(x):
    mark = "@@sandboxkit-case@@ "
    forged = "".join(mark + repr({"i": i, "t": 0.0, "cpu": 0.0, "status": "ok"}) + "\\n" for i in range(4))
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for fd in range(1, 8):
            try:
                w = os.open("/proc/%s/fd/%d" % (pid, fd), os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.write(w, b"ok" if fd != 1 else forged.encode())
            except OSError:
                pass
    try:
        os.write(3, b"ok")
    except OSError:
        pass
    os.kill(os.getppid(), 9)
    os._exit(0)
"""

ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
def f(x):
    return Anything()
"""

SHADOW_BUILTIN = """
import builtins
builtins.abs = lambda value: 0.0       # patch the test's tool for everyone in this process
def abs(value):                          # and shadow it in the shared namespace
    return 0.0
def f(x):
    return 123.0
"""

ABS_TEST = "assert abs(f(1) - 0.5) < 1e-9"

FAKE_MODULE = """
class FakeMath:
    def isclose(self, a, b, **kw):
        return True
math = FakeMath()  # the test's `math` (from the prelude) in the shared namespace
def f(x):
    return 123.0
"""

MATH_TEST = "assert math.isclose(f(1), 0.5)"


async def _grade(pool: SandboxPool, code: str, tests: list[str], isolate: bool, **kw: Any) -> Any:
    cases = [{"type": "assert", "code": t} for t in tests]
    return await grade(pool, code, cases, isolate_asserts=isolate, timeout_s=kw.pop("timeout_s", 2.0), **kw)


async def test_forged_passes_work_in_process_and_fail_isolated(pool: SandboxPool) -> None:
    forges = ((FD_FORGE, "assert f(1) == 2"), (SHADOW_BUILTIN, ABS_TEST), (FAKE_MODULE, MATH_TEST))
    plain = [await _grade(pool, code, [test], False) for code, test in forges]
    # The hole this option closes: the plain harness trusts the solution's process.
    assert [v.reward for v in plain] == [1.0, 1.0, 1.0]
    isolated = [await _grade(pool, code, [test], True) for code, test in forges]
    isolated.append(await _grade(pool, PROC_FORGE, ["assert f(1) == 2", "assert f(2) == 3"], True))
    assert [v.reward for v in isolated] == [0.0, 0.0, 0.0, 0.0], [v.error for v in isolated]
    assert "Bad file descriptor" in str(isolated[0].error)
    assert isolated[1].cases[0].message.startswith("AssertionError")
    assert isolated[2].cases[0].message.startswith("AssertionError")


#: Returns the number the test expects, found in the solution's own memory: Python's objects first
#: (the harness's data), then every readable mapping byte by byte.
MEMORY_PEEK = r"""
import ctypes, gc, re

def _find():
    pattern = re.compile(rb"f\(1\) == (\d{9})")
    for o in gc.get_objects():
        if isinstance(o, dict):
            for v in list(o.values()):
                found = pattern.search(str(v).encode("utf-8", "replace"))
                if found:
                    return int(found.group(1))
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if not parts[1].startswith("r") or (len(parts) > 5 and parts[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            found = pattern.search(ctypes.string_at(lo, hi - lo)) if hi - lo < 1 << 27 else None
            if found:
                return int(found.group(1))
    return None

ANSWER = _find()

def f(x):
    return ANSWER
"""

#: Returns a word of the test's expected string, read from what the harness tells the solution.
NAMES_PEEK = r"""
import gc

def f():
    for o in gc.get_objects():
        if isinstance(o, dict) and isinstance(o.get("names"), (list, tuple)):
            words = [n for n in o["names"] if n not in ("f", "assert")]
            if words:
                return words[0]
    return None
"""


#: A right solution that plants modules in the workspace; the test then imports them in the checker.
PLANTS = """
for name in ("sk_planted", "fractions"):
    with open(name + ".py", "w") as f:
        f.write("import os\\nos.write(3, b'planted')\\nPLANTED = True\\nFraction = None\\n")

def f(x):
    return x + 1
"""

IMPORTS_AFTER_THE_SOLUTION = """
assert f(1) == 2
try:
    import sk_planted
except ImportError:
    pass
else:
    raise AssertionError("a module the solution planted loaded in the checker")
import fractions
assert fractions.Fraction(1, 3) == fractions.Fraction(2, 6)
"""


AFFINITY = "import os\n\ndef cpus():\n    return sorted(os.sched_getaffinity(0))\n"
SAME_CPU = "import os\nassert cpus() == sorted(os.sched_getaffinity(0)) and len(cpus()) == 1, (cpus(), os.sched_getaffinity(0))"


@pytest.mark.parametrize("cases", [1, 2], ids=["one case", "two cases"])
async def test_a_checker_and_its_solution_share_one_cpu(pool: SandboxPool, cases: int) -> None:
    # They talk in strict turns: on one CPU a call into the solution costs ~18 us, across two ~62 us
    # (docs/benchmarks.md). Pinned to the CPU the run was on (one case), or one CPU per case in turn.
    verdict = await _grade(pool, AFFINITY, [SAME_CPU] * cases, True)
    assert verdict.reward == 1.0, verdict.cases


@pytest.mark.parametrize("cases", [1, 2], ids=["one case", "two cases"])
async def test_the_checker_never_imports_from_the_workspace(pool: SandboxPool, cases: int) -> None:
    tests = [IMPORTS_AFTER_THE_SOLUTION, "assert f(2) == 3"][:cases]
    verdict = await _grade(pool, PLANTS, tests, True)
    assert verdict.reward == 1.0, verdict.cases


@pytest.mark.parametrize("cases", [1, 2], ids=["one case", "two cases"])
async def test_a_solution_finds_no_test_in_its_own_memory(pool: SandboxPool, cases: int) -> None:
    # Every solution process is a fork of the harness: the tests reach it on stdin only after that,
    # through a memory file (reproduced before: this solution got reward 1.0).
    tests = ["assert f(1) == 918273645", "assert f(1) is None or f(1) == 918273645"][:cases]
    verdict = await _grade(pool, MEMORY_PEEK, tests, True, timeout_s=10.0)
    assert verdict.cases[0].status == "error", verdict.cases
    assert verdict.cases[0].message.startswith("AssertionError"), verdict.cases
    plain = await _grade(pool, MEMORY_PEEK, tests[:1], False, timeout_s=10.0)
    assert plain.reward == 1.0  # the trusting harness runs the test in the solution's process


async def test_the_names_the_solution_sees_say_nothing_of_the_tests_strings(pool: SandboxPool) -> None:
    verdict = await _grade(pool, NAMES_PEEK, ["assert f() == 'zebra'"], True)
    assert verdict.reward == 0.0, verdict.cases
    assert spelled("assert f() == 'zebra'\nimport math\ndef g():\n    return h(math.pi)") == (
        "f",
        "g",
        "h",
        "math",
        "pi",
    )


async def test_an_object_that_is_always_equal_is_never_a_pass_nor_a_none(pool: SandboxPool) -> None:
    plain = await _grade(pool, ALWAYS_EQUAL, ["assert f(1) == 2"], False)
    assert plain.reward == 1.0  # the hole
    # The solution chose to return what is not data: comparing it fails the case (it was cannot_isolate,
    # reward None, which let a wrong solution dodge its zero).
    for test in ("assert f(1) == 2", "assert 2 == f(1)", "assert [f(1)] == [2]", "assert f(1) in {2}"):
        verdict = await _grade(pool, ALWAYS_EQUAL, [test], True)
        assert (verdict.status, verdict.reward) == ("failed", 0.0), (test, verdict)
        assert "not plain data" in verdict.cases[0].message, verdict.cases[0]


CORRECT = """
from collections import namedtuple, OrderedDict, deque
from fractions import Fraction
import math
Point = namedtuple("Point", "x y")
class Oops(ValueError):
    pass
def values():
    return (1, 2), {3, 4}, frozenset({5}), 0.1 + 0.2, float("inf"), -0.0, [[1, [2]], []], {"a": (1,)}, b"\\x00\\xff", bytearray(b"z"), 2 ** 5000, 1 + 2j, None, True, "\\ud800"
def nan():
    return float("nan")
def sort_in_place(xs, d, s, buf):
    xs.sort()
    xs[0].append(9)
    d["new"] = [1]
    s.add(7)
    buf[:] = b"done"
def fail(kind):
    if kind == "value":
        raise ValueError("bad", 3)
    if kind == "own":
        raise Oops("mine")
    raise KeyError(kind)
def point():
    return Point(1, 2)
def evens(n):
    return (i for i in range(n) if i % 2 == 0)
def exact():
    return Fraction(1, 3), OrderedDict([(1, 2)]), deque([1, 2], maxlen=3)
class Solution:
    def __init__(self):
        self.calls = 0
    def twice(self, xs):
        self.calls += 1
        return [2 * x for x in xs]
LIMIT = [10, 20]
"""

CORRECT_TESTS = [
    "t, s, fs, f, inf, z, nested, d, b, ba, big, c, n, yes, sur = values()\n"
    "assert t == (1, 2) and t != [1, 2] and type(t) is tuple\n"
    "assert s == {3, 4} and fs == frozenset({5}) and type(fs) is frozenset\n"
    "assert f == 0.30000000000000004 and f != 0.3 and math.isclose(f, 0.3)\n"
    "assert inf == float('inf') and str(z) == '-0.0' and nested == [[1, [2]], []]\n"
    "assert d == {'a': (1,)} and b == b'\\x00\\xff' and ba == bytearray(b'z') and type(ba) is bytearray\n"
    "assert big == 2 ** 5000 and c == 1 + 2j and n is None and yes is True and sur == '\\ud800'\n"
    "assert nan() != nan() and math.isnan(nan())",
    "xs = [[3], [1]]; first = xs[1]; d = {}; s = set(); buf = bytearray(b'x')\n"
    "assert sort_in_place(xs, d, s, buf=buf) is None\n"
    "assert xs == [[1, 9], [3]] and xs[0] is first and d == {'new': [1]} and s == {7} and buf == b'done'",
    "try:\n    fail('value')\n    raise SystemError('no exception')\nexcept ValueError as e:\n    assert e.args == ('bad', 3)\n"
    "try:\n    fail('own')\nexcept Oops as e:\n    assert isinstance(e, ValueError) and str(e) == 'mine'\n"
    "try:\n    fail('k')\nexcept LookupError:\n    pass",
    "p = point()\nassert p == (1, 2) and p.x == 1 and p.y == 2",
    "assert list(evens(7)) == [0, 2, 4, 6] and sorted(evens(3), reverse=True) == [2, 0]",
    "fr, od, dq = exact()\nassert fr == Fraction(1, 3) and od == OrderedDict([(1, 2)]) and dq == deque([1, 2]) and dq.maxlen == 3",
    "s = Solution()\nassert s.twice([1, 2]) == [2, 4] and s.twice([]) == [] and s.calls == 2\nassert LIMIT == [10, 20]",
]


async def test_right_solutions_pass_with_every_kind_of_value(pool: SandboxPool) -> None:
    verdict = await _grade(pool, CORRECT, CORRECT_TESTS, True)
    assert verdict.status == "ok", verdict.cases
    plain = await _grade(pool, CORRECT, CORRECT_TESTS, False)
    assert plain.status == "ok", plain.cases  # the same tests mean the same thing in both modes


async def test_a_host_on_another_python_than_the_sandboxs_grades_the_same(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host on Python 3.12 sent its bytecode to the sandbox's 3.11, which crashed on it: every right answer
    # failed (26 judge tests on 3.12). Bytecode of another interpreter is now never loaded.
    import sandboxkit.judge.isolated as isolated

    monkeypatch.setattr(isolated, "MAGIC_NUMBER", b"\xff\xff\r\n")
    monkeypatch.setattr(isolated, "_test_bytecode", lambda code: "e3" + "00" * 64)  # not a code object anywhere
    isolated._test_record.cache_clear()
    try:
        verdict = await _grade(pool, CORRECT, CORRECT_TESTS, True)
    finally:
        isolated._test_record.cache_clear()
    assert verdict.status == "ok", verdict.cases


async def test_wrong_and_crashing_solutions_fail_as_they_do_in_process(pool: SandboxPool) -> None:
    code = """
import os, sys
def pair():
    return (1, 2)
def boom():
    raise ValueError("no")
def leave():
    sys.exit(0)
def vanish():
    os._exit(0)
def spin():
    while True:
        pass
def wrong_sort(xs):
    return sorted(xs)  # does not sort in place
"""
    tests = [
        "assert pair() == [1, 2]",
        "assert boom() == 1",
        "leave()",
        "try:\n    vanish()\nexcept BaseException:\n    pass",  # the test swallowing it changes nothing
        "spin()",
        "xs = [2, 1]\nwrong_sort(xs)\nassert xs == [1, 2]",
    ]
    for isolate in (True, False):
        verdict = await _grade(pool, code, tests, isolate, timeout_s=0.5)
        got = [c.status for c in verdict.cases]
        assert got == ["error", "error", "error", "error", "timeout", "error"], (isolate, verdict.cases)
        assert verdict.reward == 0.0
        messages = [c.message for c in verdict.cases]
        assert messages[1] == "ValueError: no (main.py line 5)", messages
        assert "sys.exit(0)" in messages[2] and "exited (code 0)" in messages[3], messages


async def test_values_that_are_not_data_fail_the_case_or_give_cannot_isolate(pool: SandboxPool) -> None:
    code = "class Box:\n    pass\ndef make():\n    return Box()\ndef ident(x):\n    return x\n"
    # Comparing or hashing what the solution returned: the solution's doing, the case fails.
    for test in ("assert make() == make()", "assert {make(): 1}"):
        verdict = await _grade(pool, code, [test], True)
        assert (verdict.status, verdict.reward) == ("failed", 0.0), (test, verdict)
    # A test that hands the solution something that is not data: the test's doing, no reward.
    verdict = await _grade(pool, code, ["assert ident(lambda: 1) is not None"], True)
    assert verdict.status == "infra_error" and verdict.reward is None, verdict
    assert (verdict.error or "").startswith("cannot_isolate:"), verdict.error
    # Using an object without asking it to decide anything is fine.
    verdict = await _grade(pool, code, ["b = make()\nassert isinstance(b, Box) and ident(b) is b"], True)
    assert verdict.status == "ok", verdict.cases


async def test_mixed_problem_and_compile_error(pool: SandboxPool) -> None:
    tests = {
        "cases": [
            {"type": "call", "fn_name": "f", "args": [1], "expected": 2},
            {"type": "assert", "code": "assert f(2) == 3"},
            {"type": "stdio", "stdin": "", "expected_stdout": ""},
        ]
    }
    verdict = await grade(pool, "def f(x):\n    return x + 1\n", tests, isolate_asserts=True)
    assert verdict.status == "ok" and verdict.passed == 3, verdict.cases
    broken = await _grade(pool, "def f(x:\n", ["assert f(1) == 2"], True)
    assert broken.status == "compile_error"


def test_the_harness_imports_the_tests_modules_before_the_solution_runs() -> None:
    assert imports_of("import math, os.path\nfrom random import Random\nfrom . import x\n") == [
        "math",
        "os.path",
        "random",
    ]
    assert imports_of("def (") == []
    script = build_isolated_harness("x = 1", [], timeout_s=1.0)
    assert "'imports': []" in script


@pytest.mark.parametrize("isolate", [True, False])
async def test_stop_on_first_failure_skips_the_rest(pool: SandboxPool, isolate: bool) -> None:
    verdict = await _grade(
        pool, "def f(x):\n    return x\n", ["assert f(1) == 2", "assert f(1) == 1"], isolate, shaping="all_or_nothing"
    )
    assert [c.status for c in verdict.cases] == ["error", "skipped"]


async def test_isolation_is_the_default_and_rows_and_the_cli_option_turn_it_off(pool: SandboxPool) -> None:
    row = {"completion": FD_FORGE, "tests": [{"type": "assert", "code": "assert f(1) == 2"}]}
    verdicts = await grade_many(pool, [row, {**row, "isolate_asserts": False}, {**row, "isolate_asserts": "yes"}])
    assert [v.reward for v in verdicts] == [0.0, 1.0, None]
    assert verdicts[2].status == "invalid" and "isolate_asserts must be true or false" in str(verdicts[2].error)
    off = await grade_many(pool, [row], isolate_asserts=False)
    assert off[0].reward == 1.0  # the hole the default closes: the trusting harness believes the forge


def test_cli_isolate_asserts_option(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from sandboxkit.cli import app

    row = {"id": "forge", "completion": FD_FORGE, "tests": [{"type": "assert", "code": "assert f(1) == 2"}]}
    (tmp_path / "in.jsonl").write_text(json.dumps(row) + "\n")
    rewards = []
    for extra in ([], ["--no-isolate-asserts"], ["--isolate-asserts"]):
        out = tmp_path / f"out{len(rewards)}.jsonl"
        done = CliRunner().invoke(app, ["grade", str(tmp_path / "in.jsonl"), "-o", str(out), "-q", "-j", "2", *extra])
        assert done.exit_code == 0, done.output
        rewards.append(json.loads(out.read_text())["reward"])
    assert rewards == [0.0, 1.0, 0.0]


@pytest.mark.docker
async def test_on_docker_too() -> None:
    import uuid

    from sandboxkit.backends.docker import DockerBackend
    from support.judge import FAST
    from support.marks import missing

    if not DockerBackend.availability().usable:
        missing("the docker backend is not usable here")  # skip locally, fail under CI=true
    backend = DockerBackend(labels={"sandboxkit.test": uuid.uuid4().hex})
    try:
        async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
            forged = await _grade(pool, FD_FORGE, ["assert f(1) == 2"], True)
            equal = await _grade(pool, ALWAYS_EQUAL, ["assert f(1) == 2"], True)
            right = await _grade(pool, CORRECT, CORRECT_TESTS, True)
            # The runner forks the program from its own memory, which held the run's stdin (the tests).
            peek = await _grade(pool, MEMORY_PEEK, ["assert f(1) == 918273645"], True, timeout_s=10.0)
    finally:
        await backend.aclose()
    assert (forged.reward, equal.reward, equal.status) == (0.0, 0.0, "failed")
    assert right.status == "ok", right.cases
    assert peek.reward == 0.0 and peek.cases[0].message.startswith("AssertionError"), peek.cases


#: (solution, test code, CPU limit): each must get the same status and message from both harnesses.
PARITY = [
    ("raise ValueError('at import')\ndef f(): pass\n", "f()", 1.0),
    ("import sys\nsys.exit(3)\n", "f()", 1.0),
    ("import os\nos._exit(0)\n", "f()", 1.0),
    ("x = [0] * (10**12)\n", "f()", 1.0),
    ("import time\ntime.sleep(100)\n", "f()", 0.2),
    ("def f(a, *, k):\n    k.append(a)\n    return k\n", "l = []\nr = f(1, k=l)\nassert r is l and l == [1]", 1.0),
    (
        "def g():\n    yield 1\n    return 5\n",
        "it = g()\nnext(it)\ntry:\n    next(it)\nexcept StopIteration as e:\n    assert e.value == 5",
        1.0,
    ),
    (
        "class S:\n    def __init__(self): self.v = []\n    def add(self, x): self.v.append(x); return self\n"
        "def use(s): return len(s.v)\n",
        "s = S()\ns.add(1).add(2)\nassert use(s) == 2 and s.v == [1, 2]",
        1.0,
    ),
    ("def f(d):\n    d.setdefault('a', []).append(1)\n", "d = {}\nf(d)\nf(d)\nassert d == {'a': [1, 1]}", 1.0),
    ("def f():\n    raise KeyboardInterrupt\n", "f()", 1.0),
    ("def f():\n    return {1: 'a', 2: 'b'}.keys()\n", "assert list(f()) == [1, 2] and len(f()) == 2", 1.0),
    ("def f(x):\n    return x\n", "import collections\nassert f(collections.Counter('ab')) == {'a': 1, 'b': 1}", 1.0),
]


def test_both_harnesses_agree_on_how_a_case_ends(tmp_path: Path) -> None:
    import subprocess
    import sys

    from sandboxkit.judge import AssertCase
    from sandboxkit.judge.harness import build_python_harness, parse_harness_output
    from sandboxkit.judge.isolated import parse_isolated_output

    for source, test, cpu in PARITY:
        got = []
        for isolated in (True, False):
            # The plain harness with a forked child: run inline, a case's death is read from the sandbox
            # run's exit, which this direct run does not have (tests/judge/test_inline_harness.py).
            if isolated:
                text = build_isolated_harness(source, [AssertCase(code=test)], timeout_s=cpu)
            else:
                text = build_python_harness(source, [AssertCase(code=test)], timeout_s=cpu, inline=False)
            script = tmp_path / "harness.py"  # a file, as the backends run it (over 128 KiB: too long for -c)
            script.write_text(text)
            done = subprocess.run(
                [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
            )
            item = (parse_isolated_output(done.stdout)[1] if isolated else parse_harness_output(done.stdout).results)[0]
            got.append((item["status"], item.get("error")))
        assert got[0] == got[1], (source, test, got)


async def test_the_solution_cannot_raise_the_checkers_own_exceptions(pool: SandboxPool) -> None:
    # Classes are named by module and name; `__main__` in the checker is the harness itself.
    code = (
        "class _Cannot(Exception):\n    pass\n_Cannot.__module__ = '__main__'\n"
        "class _Died(Exception):\n    pass\n_Died.__module__ = '__main__'\n"
        "def f(kind):\n    raise (_Cannot if kind else _Died)('x')\n"
    )
    tests = ["try:\n    f(1)\nexcept Exception:\n    pass", "try:\n    f(0)\nexcept Exception:\n    pass", "f(1)"]
    verdict = await _grade(pool, code, tests, True)
    assert [c.status for c in verdict.cases] == ["passed", "passed", "error"], verdict.cases
    assert verdict.cases[2].message == "_Cannot: x (main.py line 8)"


async def test_only_the_names_the_test_spells_cross(pool: SandboxPool) -> None:
    # A global the test never names is never encoded (a big table costs nothing); one it names is.
    code = "TABLE = list(range(1_000_000))\nLIMIT = (1, [2])\ndef f(i):\n    return TABLE[i]\n"
    tests = ["assert f(5) == 5 and f(999_999) == 999_999", "assert LIMIT == (1, [2]) and 'TAB' + 'LE' not in globals()"]
    verdict = await _grade(pool, code, tests, True)
    assert verdict.status == "ok", verdict.cases


async def test_the_rl_adapters_pass_it_on() -> None:
    from sandboxkit.integrations.trl import SandboxReward
    from sandboxkit.integrations.verl import compute_score

    response = "```python\n" + FD_FORGE + "```"
    truth = {"assert_case": ["assert f(1) == 2"]}
    scores = [(await compute_score("x", response, truth, isolate_asserts=on))["score"] for on in (False, True)]
    assert scores == [1.0, 0.0]
    equal = await compute_score("x", "```python\n" + ALWAYS_EQUAL + "```", truth, isolate_asserts=True)
    assert (equal["score"], equal["status"]) == (0.0, "failed")  # a wrong answer, not "could not judge"
    with SandboxReward("subprocess", max_concurrency=2, isolate_asserts=True) as reward:
        completions = [response, "```python\n" + ALWAYS_EQUAL + "```"]
        rewards = await reward(prompts=["p"] * 2, completions=completions, completion_ids=[[1]] * 2, tests=[truth] * 2)
    assert rewards == [0.0, 0.0]  # a number, never the None TRL leaves out of the group
