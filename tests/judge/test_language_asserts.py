"""A failing assert fails the case, in every language, as in Sandbox Fusion's runners.

Each language gets the same shaped problem: a solution that defines ``add`` (correct, or off by
one) and an ``assert`` test case written the way that language's test suites (MultiPL-E, Sandbox
Fusion datasets) write asserts. The correct solution must pass and the wrong one must fail: a
language whose asserts are silently off (Java without ``-ea``, C built with ``-DNDEBUG``) would
pass the wrong one and hand out reward 1.0 for a wrong program.

Runs on the subprocess backend for every installed toolchain, and on Docker for the toolchains
the ``sandboxkit-base`` image carries.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from sandboxkit import Limits, SandboxPool
from sandboxkit.judge import grade
from sandboxkit.languages import LANGUAGES
from support.judge import FAST, needs_subprocess, requires


@dataclass(frozen=True)
class AssertProblem:
    language: str
    solution: str  # with {result} where the function's return expression goes
    test: str
    right: str = "a + b"
    wrong: str = "a + b + 1"
    needs: str = "true"  # shell check for a library the test loads (an older image may lack it)


PROBLEMS = [
    AssertProblem("python", "def add(a, b):\n    return {result}\n", "assert add(1, 2) == 3"),
    AssertProblem(
        "c",
        "#include <assert.h>\nint add(int a, int b) {{ return {result}; }}\n",
        "int main(void) { assert(add(1, 2) == 3); return 0; }",
    ),
    AssertProblem(
        "cpp",
        "#include <cassert>\nint add(int a, int b) {{ return {result}; }}\n",
        "int main() { assert(add(1, 2) == 3); }",
    ),
    AssertProblem(
        "java",
        "class Solution {{ static int add(int a, int b) {{ return {result}; }} }}\n",
        "public class Main { public static void main(String[] args) { assert Solution.add(1, 2) == 3; } }",
    ),
    AssertProblem(
        "rust",
        "fn add(a: i32, b: i32) -> i32 {{ {result} }}\n",
        "fn main() { assert!(add(1, 2) == 3); }",
    ),
    AssertProblem(
        "rust",  # debug_assert! fires, as in Sandbox Fusion's debug build
        "fn add(a: i32, b: i32) -> i32 {{ {result} }}\n",
        "fn main() { debug_assert_eq!(add(1, 2), 3); }",
    ),
    AssertProblem(
        "go",
        "package main\n\nfunc add(a int, b int) int {{ return {result} }}\n",
        'func main() { if add(1, 2) != 3 { panic("add(1, 2) != 3") } }',
    ),
    AssertProblem(
        "javascript",
        "function add(a, b) {{ return {result}; }}\n",
        'const assert = require("assert");\nassert.strictEqual(add(1, 2), 3);',
    ),
    AssertProblem(
        "javascript",  # node:assert's deepEqual, as MultiPL-E's JS tests use it
        "function add(a, b) {{ return {result}; }}\n",
        'const assert = require("node:assert");\nassert.deepEqual([add(1, 2)], [3]);',
    ),
    AssertProblem(
        "bash",  # MultiPL-E's shell tests: set -e, then [[ ]] checks
        "add() {{ echo $(( {result} )); }}\n",
        'set -e\n[[ $(add 1 2) = "3" ]]',
        right="$1 + $2",
        wrong="$1 + $2 + 1",
    ),
    AssertProblem(
        "bash",  # without set -e the test must exit non-zero itself, as in Sandbox Fusion
        "add() {{ echo $(( {result} )); }}\n",
        '[[ $(add 1 2) = "3" ]] || exit 1\necho checked',
        right="$1 + $2",
        wrong="$1 + $2 + 1",
    ),
    # ---- Sandbox Fusion's other languages, with the assert idioms of MultiPL-E-style test suites.
    AssertProblem(
        "php",  # no <?php (the runner adds it); MultiPL-E throws, since php-cli compiles assert() out
        "function add($a, $b) {{ return {result}; }}\n",
        'if (add(1, 2) !== 3) { throw new Exception("Test failed!"); }',
        right="$a + $b",
        wrong="$a + $b + 1",
    ),
    AssertProblem(
        "ruby",
        "def add(a, b)\n  {result}\nend\n",
        "require 'test/unit'\nclass TestAdd < Test::Unit::TestCase\n  def test_add\n"
        "    assert_equal(3, add(1, 2))\n  end\nend",
    ),
    AssertProblem(
        "perl",
        "sub add {{ my ($a, $b) = @_; return {result}; }}\n",
        'use Test::Deep;\nif (eq_deeply(add(1, 2), 3)) { print "ok\\n"; } else { die "Test failed!"; }',
        right="$a + $b",
        wrong="$a + $b + 1",
        needs="perl -MTest::Deep -e 1",
    ),
    AssertProblem(
        "lua",
        "local function add(a, b) return {result} end\n",
        "lu = require('luaunit')\nfunction test_add() lu.assertEquals(add(1, 2), 3) end\nos.exit(lu.LuaUnit.run())",
        needs="lua -e 'require(\"luaunit\")'",
    ),
    AssertProblem(
        "r",
        "add <- function(a, b) {{ {result} }}\n",
        "stopifnot(isTRUE(all.equal(add(1, 2), 3)))",
    ),
    AssertProblem(
        "racket",  # rackunit's check-equal? only prints a failure (exit 0, as on Sandbox Fusion): tests raise
        "#lang racket\n(define (add a b) {result})\n",
        '(unless (equal? (add 1 2) 3) (error \'test "add 1 2 is not 3"))',
        right="(+ a b)",
        wrong="(+ a b 1)",
    ),
    AssertProblem(
        "d",  # D_ut: unittest blocks run, main does not
        "int add(int a, int b) {{ return {result}; }}\n",
        "unittest { assert(add(1, 2) == 3); }\nvoid main() {}",
    ),
    AssertProblem(
        "scala",  # MultiPL-E's layout: the prompt opens the object, the tests close it
        "object Main {{\n  def add(a: Int, b: Int): Int = {result}\n",
        "  def main(args: Array[String]): Unit = { assert(add(1, 2) == 3) }\n}",
    ),
    AssertProblem(
        "kotlin",
        "fun add(a: Int, b: Int): Int = {result}\n",
        'if (add(1, 2) != 3) { throw AssertionError("add(1, 2) != 3") }',
    ),
    AssertProblem(
        "csharp",  # Debug.Assert ends the process, as under dotnet's Debug build
        "using System.Diagnostics;\nclass Problem {{\n  public static int Add(int a, int b) {{ return {result}; }}\n",
        "  public static void Main(string[] args) { Debug.Assert(Add(1, 2) == 3); }\n}",
    ),
    AssertProblem(
        "typescript",
        "function add(a: number, b: number): number {{ return {result}; }}\n",
        "declare var require: any;\nconst assert = require('node:assert');\nassert.deepEqual(add(1, 2), 3);",
    ),
]


#: rustc and the JVM reserve far more address space than FAST's 512 MiB (rustc's code generator dies
#: with "memory allocation failed" under it), so the compiled-language runs get room.
ROOMY = Limits(timeout_s=20.0, memory_mb=2048)


def _installed(language: str) -> bool:
    return not LANGUAGES[language].missing_binaries()


def _ids(problem: AssertProblem) -> str:
    return f"{problem.language}:{problem.test.splitlines()[-1][:30]}"


async def _check(pool: SandboxPool, problem: AssertProblem) -> None:
    tests = [{"type": "assert", "code": problem.test}]
    fence = "```" + problem.language + "\n"
    right = fence + problem.solution.format(result=problem.right) + "```"
    wrong = fence + problem.solution.format(result=problem.wrong) + "```"
    good = await grade(pool, right, tests, language=problem.language, limits=ROOMY)
    assert (good.status, good.reward) == ("ok", 1.0), good
    bad = await grade(pool, wrong, tests, language=problem.language, limits=ROOMY)
    assert (bad.status, bad.reward) == ("failed", 0.0), bad
    assert bad.cases[0].status == "error", bad


@needs_subprocess
@pytest.mark.parametrize("problem", PROBLEMS, ids=_ids)
async def test_a_failing_assert_fails_on_subprocess(problem: AssertProblem) -> None:
    if not _installed(problem.language) and os.environ.get("CI") != "true":
        pytest.skip(f"{problem.language} toolchain not installed (CI=true turns this skip into a failure)")
    async with SandboxPool("subprocess", max_concurrency=2, limits=FAST) as pool:
        await _check(pool, problem)


@needs_subprocess
async def test_rust_integer_overflow_panics_as_in_sandbox_fusion() -> None:
    if not _installed("rust") and os.environ.get("CI") != "true":
        pytest.skip("rustc not installed (CI=true turns this skip into a failure)")
    code = '```rust\nfn main() { let x: i32 = std::env::args().count() as i32 + 2147483647; println!("{}", x); }\n```'
    async with SandboxPool("subprocess", max_concurrency=1, limits=FAST) as pool:
        verdict = await grade(pool, code, [{"stdin": "", "expected_stdout": None}], language="rust", limits=ROOMY)
    assert verdict.status == "failed" and "exit code 101" in verdict.cases[0].message, verdict


def _docker_usable() -> bool:
    try:
        from sandboxkit.backends.docker import DockerBackend
    except Exception:
        return False
    return bool(DockerBackend.availability().usable)


#: The toolchains of the sandboxkit-base image (scripts/docker-setup.sh): no rustc, no go, and none of the heavy
#: ones SANDBOXKIT_DOCKER_FULL=1 adds (R, Racket, Scala, Kotlin, C#; tests/backends/test_language_table.py
#: covers them on Docker when the image has them).
IN_IMAGE = {"python", "c", "cpp", "java", "javascript", "bash", "php", "ruby", "perl", "lua", "d", "typescript"}


@pytest.fixture
async def docker_pool() -> AsyncIterator[SandboxPool]:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels={"sandboxkit.test": uuid.uuid4().hex})
    try:
        async with SandboxPool(backend, max_concurrency=2, limits=FAST) as pool:
            yield pool
    finally:
        await backend.aclose()


@pytest.mark.docker
@requires(_docker_usable(), "the docker backend is not usable here")
@pytest.mark.parametrize("problem", [p for p in PROBLEMS if p.language in IN_IMAGE], ids=_ids)
async def test_a_failing_assert_fails_on_docker(docker_pool: SandboxPool, problem: AssertProblem) -> None:
    lang = LANGUAGES[problem.language]
    checks = " && ".join(
        [*(f"command -v {b}" for b in lang.binaries), *(f"test -f {f}" for f in lang.files), problem.needs]
    )
    if (await docker_pool.exec(checks)).exit_code != 0:
        # An image built before these toolchains joined it (docker-setup.sh rebuilds it when its list changes).
        message = f"the image lacks {problem.language}: rerun scripts/docker-setup.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    await _check(docker_pool, problem)
