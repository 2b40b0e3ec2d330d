"""The Python per-case harness, run with this machine's interpreter (the grader runs it in a sandbox)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from sandboxkit.judge import AssertCase, CallCase, StdioCase
from sandboxkit.judge.harness import (
    MARK,
    build_python_harness,
    canonical_hash,
    parse_harness_output,
    prelude_for,
    python_literal,
)

SOLUTION = """
import os, sys
def f(x):
    if x == "raise":
        raise ValueError("boom")
    if x == "exit0":
        sys.exit(0)
    if x == "os_exit":
        os._exit(0)
    if x == "loop":
        while True:
            pass
    if x == "segv":
        os.kill(os.getpid(), 11)
    print("noise on stdout")  # must not disturb the report channel
    return (x, {1, 2})
"""


def run_harness(
    source: str, cases: list[StdioCase | AssertCase | CallCase], **kw: object
) -> dict[int, dict[str, object]]:
    script = build_python_harness(source, cases, timeout_s=kw.pop("timeout_s", 1.0), **kw)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as cwd:  # the harness keeps stdin files in its working directory
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=cwd)
    report = parse_harness_output(done.stdout)
    assert report.finished, done.stderr
    return report.results


def test_each_case_is_isolated_and_failures_are_failures() -> None:
    names = ["raise", "exit0", "os_exit", "loop", "segv", "ok"]
    results = run_harness(SOLUTION, [CallCase(fn_name="f", args=[n], expected="") for n in names])
    statuses = [results[i]["status"] for i in range(len(names))]
    assert statuses == ["error", "error", "error", "timeout", "error", "ok"]
    assert "ValueError: boom (main.py line 5)" in str(results[0]["error"])
    assert "sys.exit(0)" in str(results[1]["error"])
    assert "exited (code 0)" in str(results[2]["error"])
    assert "signal 11" in str(results[4]["error"])
    # The value comes back JSON-normalised: tuple -> list, set -> sorted list.
    assert json.loads(results[5]["value"]["json"]) == ["ok", [1, 2]]  # type: ignore[index]


def test_assert_cases_and_leetcode_prelude() -> None:
    source = "class Solution:\n    def total(self, xs: List[int]) -> int:\n        return sum(xs)\n"
    cases = [
        CallCase(fn_name="total", args=[[1, 2, 3]], expected=6),
        AssertCase(code="assert Solution().total([1]) == 1"),
        AssertCase(code="x = 1\nassert Solution().total([1]) == 2"),
    ]
    results = run_harness(source, cases)
    assert [results[i]["status"] for i in range(3)] == ["ok", "ok", "error"]
    assert str(results[2]["error"]).endswith("(<test> line 2): assert Solution().total([1]) == 2")


def test_stdio_cases_behave_like_a_script() -> None:
    source = """
import sys
data = sys.stdin.read().split()
if data[0] == "exit0":
    print("bye")
    sys.exit(0)
if data[0] == "exit3":
    sys.exit(3)
if data[0] == "raise":
    raise IndexError("deep")
if data[0] == "flood":
    while True:
        print("x" * 1000)
print(__name__, sum(map(int, data)))
"""
    stdins = ["1 2 3\n", "exit0", "exit3", "raise", "flood"]
    results = run_harness(source, [StdioCase(stdin=s) for s in stdins], output_bytes=64 * 1024)
    ok, exit0, exit3, crash, flood = (results[i] for i in range(5))
    assert (ok["status"], ok["code"], ok["stdout"]) == ("ok", 0, "__main__ 6\n")
    assert (exit0["status"], exit0["stdout"]) == ("ok", "bye\n")  # sys.exit(0) is a normal end for a script
    assert (exit3["status"], exit3["code"]) == ("error", 3)
    assert crash["code"] == 1 and str(crash["stderr"]).rstrip().endswith("IndexError: deep")
    assert flood["status"] == "output_limit"


def test_syntax_error_is_reported_once() -> None:
    script = build_python_harness("def f(:\n", [CallCase(fn_name="f", expected=1)], timeout_s=1)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    report = parse_harness_output(done.stdout)
    assert report.syntax_error is not None and "SyntaxError" in report.syntax_error
    assert report.results == {}


def test_stop_on_error_stops_after_the_first_error() -> None:
    cases = [CallCase(fn_name="f", args=[n], expected=None) for n in ("ok", "raise", "ok")]
    results = run_harness(SOLUTION, cases, stop_on_error=True)
    assert sorted(results) == [0, 1]


def test_expected_values_never_enter_the_sandbox() -> None:
    secret = "EXPECTED-d41d8cd9"
    script = build_python_harness("def f(): pass", [CallCase(fn_name="f", expected=secret)], timeout_s=1)
    assert secret not in script


def test_large_values_come_back_as_a_hash() -> None:
    results = run_harness("def big():\n    return list(range(100000))\n", [CallCase(fn_name="big", expected=None)])
    value = results[0]["value"]
    assert isinstance(value, dict) and value["sha256"] == canonical_hash(list(range(100000)))


def test_report_parser_ignores_noise() -> None:
    text = f"hello\n{MARK}not a literal\n{MARK}{{'i': 0, 'status': 'ok'}}\n{MARK}[1]\n{MARK}__import__('os')\n"
    report = parse_harness_output(text + f"{MARK}{{'done': True}}\n")
    assert report.finished and report.results == {0: {"i": 0, "status": "ok"}}
    assert not parse_harness_output("").finished


def test_only_the_prelude_names_the_code_mentions_are_imported() -> None:
    assert prelude_for(["def f(xs: List[int]):\n    return Counter(xs)\n"]) == (
        "from typing import Counter, List\nfrom collections import Counter\n"
    )  # typing by name (binding all ~100 of its names costs a forked run copied pages), then the rest
    assert prelude_for(["def f(x):\n    return x + 1\n"]) == ""
    # The test code counts too: it runs in the solution's namespace.
    assert "import heapq" in prelude_for(["def f(): pass", "assert heapq.nlargest(1, [f()]) == [None]"])
    # And the harness still finds them at run time.
    results = run_harness(
        "def f(xs: List[int]) -> int:\n    return max(Counter(xs).values())\n",
        [
            CallCase(fn_name="f", args=[[1, 1, 2]], expected=2),
            AssertCase(code="assert gcd(4, 6) == 2"),
            # collections' Counter wins over typing's, as with the whole prelude; typing's Dict is unbound.
            AssertCase(
                code="import collections, typing\nassert Counter is collections.Counter and List is typing.List"
            ),
            AssertCase(code="assert 'Di' + 'ct' not in globals()"),  # spelt apart: a spelt name is bound
        ],
    )
    assert [results[i]["status"] for i in range(4)] == ["ok"] * 4


def test_data_travels_as_a_python_literal() -> None:
    value = {"a": [1, 2.5, float("inf"), float("-inf"), None, True, "x'\"y\n"], "b": {}}
    assert eval(python_literal(value)) == value
    results = run_harness("def f(x):\n    return x\n", [CallCase(fn_name="f", args=["é\u2028\x00"], expected=None)])
    assert json.loads(str(results[0]["value"]["json"])) == "é\u2028\x00"  # type: ignore[index]


def test_time_is_cpu_time_and_the_wall_limit_catches_sleepers() -> None:
    source = "import sys, time\ndef f(x):\n    if x == 'spin':\n        while True:\n            pass\n    time.sleep(x)\n    return x\n"
    # 0.3 s of sleep uses no CPU: it passes a 0.2 s limit (the wall limit is 2 * 0.2 + 1 s);
    # a sleep past the wall limit and a busy loop are timeouts, told apart by ``why``.
    cases = [CallCase(fn_name="f", args=[a], expected=a) for a in (0.3, 2.0, "spin")]
    results = run_harness(source, cases, timeout_s=0.2)
    assert [results[i]["status"] for i in range(3)] == ["ok", "timeout", "timeout"]
    assert (results[1]["why"], results[2]["why"]) == ("wall", "cpu")
    assert float(results[2]["cpu"]) >= 0.2  # type: ignore[arg-type]


def test_cases_run_in_parallel_unless_stopping_early() -> None:
    source = "import time\ndef f():\n    time.sleep(0.5)\n    return 1\n"
    cases = [CallCase(fn_name="f", expected=1) for _ in range(4)]
    started = time.monotonic()
    results = run_harness(source, cases, timeout_s=5.0, parallel=4)
    parallel_s = time.monotonic() - started
    assert all(results[i]["status"] == "ok" for i in range(4))
    started = time.monotonic()
    run_harness(source, cases, timeout_s=5.0, stop_on_error=True)
    serial_s = time.monotonic() - started
    # Sleeping cases overlap whatever the CPU count; one at a time they take 4 * 0.5 s.
    assert serial_s >= 2.0 and parallel_s < serial_s - 0.8, (parallel_s, serial_s)


def test_a_memory_kill_while_cases_share_the_sandbox_is_judged_alone() -> None:
    # The kernel's OOM killer sends SIGKILL. Here each case kills itself that way only when the other
    # ran at the same time (as a shared cgroup memory limit would), never alone: the harness must
    # run them again one at a time before reporting, so both pass.
    source = """
import os, time
def f(i):
    open("running-%d" % i, "w").close()
    time.sleep(0.3)
    other = os.path.exists("running-%d" % (1 - i))
    os.remove("running-%d" % i)
    if other:
        os.kill(os.getpid(), 9)
    return i
"""
    cases = [CallCase(fn_name="f", args=[i], expected=i) for i in range(2)]
    results = run_harness(source, cases, timeout_s=5.0, parallel=2)
    assert [results[i]["status"] for i in range(2)] == ["ok", "ok"]


def test_non_finite_arguments_reach_the_function() -> None:
    results = run_harness(
        "def f(x):\n    return x > 1e308\n", [CallCase(fn_name="f", args=[float("inf")], expected=True)]
    )
    assert json.loads(str(results[0]["value"]["json"])) is True  # type: ignore[index]


def test_waiting_for_a_cpu_does_not_count_against_the_wall_limit() -> None:
    # Busy processes outnumber the CPUs many times, so each case (0.12 s of CPU, limit 0.2 s) waits
    # far longer than its 1.4 s wall limit for its share: waiting is not sleeping, so it passes.
    source = "def f():\n    import time\n    end = time.process_time() + 0.12\n    while time.process_time() < end:\n        pass\n    return 1\n"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(12 * (os.cpu_count() or 1))]
    try:
        results = run_harness(source, [CallCase(fn_name="f", expected=1) for _ in range(4)], timeout_s=0.2)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert [results[i]["status"] for i in range(4)] == ["ok"] * 4, results


def test_the_harness_runs_from_source_where_its_bytecode_does_not_fit() -> None:
    # The harness ships compiled for interpreters with this one's bytecode magic number, and as
    # source for any other (a sandbox image with another Python): both must give the same results.
    from importlib.util import MAGIC_NUMBER

    cases = [CallCase(fn_name="f", args=["raise"], expected=""), CallCase(fn_name="f", args=["ok"], expected="")]
    for group in (cases, cases[:1]):  # forked children, and the one case run inline
        script = build_python_harness(SOLUTION, group, timeout_s=1.0)
        assert repr(MAGIC_NUMBER) in script
        other = script.replace(repr(MAGIC_NUMBER), repr(b"\x00\x00\r\n"))
        for text in (script, other):
            done = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=60)
            report = parse_harness_output(done.stdout)
            assert report.finished, done.stderr
            assert [report.results[i]["status"] for i in range(len(group))] == ["error", "ok"][: len(group)]
            assert "ValueError: boom (main.py line 5)" in str(report.results[0]["error"])
            assert report.inline == (0 if len(group) == 1 else None)
