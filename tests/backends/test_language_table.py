"""Sandbox Fusion's languages on every local command backend: the same rows on subprocess and Docker.

Per language: hello world, stdin echo, a compile error (compiled languages), a runtime error with its
exit code, and a timeout. Per test-framework language (pytest, go_test, junit): a passing suite is
``ok`` and a failing one ``failed``, as Sandbox Fusion reads the framework's exit code.

One sandbox per backend for the whole module keeps this cheap. A language whose toolchain is missing
skips locally and fails under ``CI=true`` (CI installs every toolchain the docs claim); the languages
that cannot be installed here (julia, swift, lean, cuda, python_gpu) must raise ``ToolchainMissing``
that says what to install.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandboxkit.base import Sandbox
from sandboxkit.errors import ToolchainMissing
from sandboxkit.languages import LANGUAGES
from sandboxkit.models import Limits, RunRequest, Status
from support.docker_engine import engine_status
from support.language_programs import COMPILED, PROGRAMS, SUITES

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: JVM-family compilers (scalac, kotlinc) take seconds to start on a loaded 2-core machine.
ROOMY = Limits(timeout_s=30.0, compile_timeout_s=60.0, memory_mb=1024)
SHORT = ROOMY.merged(timeout_s=1.0)
CI = os.environ.get("CI") == "true"
BACKENDS = [
    pytest.param("subprocess", id="subprocess"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]
UNAVAILABLE = sorted(name for name, lang in LANGUAGES.items() if lang.unavailable)
#: Languages whose toolchain the default Docker image leaves out, skipped there even under CI: go (rust and go
#: double the image; SANDBOXKIT_DOCKER_EXTRA_PACKAGES adds them) and the heavy toolchains that
#: SANDBOXKIT_DOCKER_FULL=1 adds (scripts/toolchains.sh). With them in the image, these rows run too.
DOCKER_OPT_IN = {"go_test", "r", "racket", "scala", "kotlin", "csharp"}


async def _open(kind: str) -> tuple[Any, Sandbox]:
    if kind == "subprocess":
        from sandboxkit.backends.subprocess import SubprocessBackend

        backend: Any = SubprocessBackend()
    else:
        usable, why = engine_status()
        if not usable:
            if CI:
                pytest.fail(f"docker backend unusable under CI: {why}")
            pytest.skip(why)
        from sandboxkit.backends.docker import DockerBackend

        backend = DockerBackend(labels={"sandboxkit.test": uuid.uuid4().hex})
    return backend, await backend.open(ROOMY)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    backend, sb = await _open(request.param)
    try:
        yield sb
    finally:
        await sb.close()
        await backend.aclose()


_present: dict[tuple[str, str], bool] = {}


async def _need(sandbox: Sandbox, language: str) -> None:
    """Skip (fail under CI) when this backend lacks the toolchain: CI installs all of them."""
    key = (sandbox.backend_name, language)
    if key not in _present:
        lang = LANGUAGES[language]
        if sandbox.backend_name == "subprocess":
            _present[key] = not lang.missing_binaries()
        else:
            checks = [f"command -v {b}" for b in lang.binaries] + [
                f"{{ test -f {f} || test -c {f}; }}" for f in lang.files
            ]
            _present[key] = (await sandbox.exec(" && ".join(checks))).exit_code == 0
    if not _present[key]:
        message = f"{language}: {LANGUAGES[language].install_hint} (missing on {sandbox.backend_name})"
        if CI and not (sandbox.backend_name == "docker" and language in DOCKER_OPT_IN):
            pytest.fail(message)
        pytest.skip(message)


async def _run(sandbox: Sandbox, language: str, code: str, limits: Limits = ROOMY, stdin: str = "") -> Any:
    await _need(sandbox, language)
    return await sandbox.run(RunRequest(code=code, language=language, stdin=stdin, limits=limits))


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_hello_world(sandbox: Sandbox, language: str) -> None:
    result = await _run(sandbox, language, PROGRAMS[language].hello)
    assert result.status is Status.OK, result
    assert result.stdout.strip() == "hello"  # sqlite3 and vvp print the value, then a newline
    assert result.language == language


@pytest.mark.parametrize("language", sorted(k for k, p in PROGRAMS.items() if p.echo is not None))
async def test_stdin_echo(sandbox: Sandbox, language: str) -> None:
    echo = PROGRAMS[language].echo
    assert echo is not None
    result = await _run(sandbox, language, echo, stdin="héllo wörld\nsecond line\n")
    assert result.status is Status.OK, result
    assert result.stdout == "héllo wörld\n"


@pytest.mark.parametrize("language", COMPILED)
async def test_compile_error(sandbox: Sandbox, language: str) -> None:
    result = await _run(sandbox, language, PROGRAMS[language].bad)
    assert result.status is Status.COMPILE_ERROR, result
    assert result.compile is not None and result.compile.exit_code != 0
    assert result.compile.stderr or result.compile.stdout
    assert result.stdout == ""


@pytest.mark.parametrize("language", sorted(set(PROGRAMS) - set(COMPILED)))
async def test_broken_interpreted_program_fails(sandbox: Sandbox, language: str) -> None:
    result = await _run(sandbox, language, PROGRAMS[language].bad)
    assert result.status is Status.FAILED, result
    assert result.exit_code != 0 and (result.stderr or result.stdout)


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_runtime_error_has_its_exit_code(sandbox: Sandbox, language: str) -> None:
    result = await _run(sandbox, language, PROGRAMS[language].runtime_error)
    assert result.status is Status.FAILED, result
    assert result.exit_code not in (0, None), result
    if language == "php":
        assert result.exit_code == 3  # exit(3) comes back as it is


@pytest.mark.parametrize("language", sorted(PROGRAMS))
async def test_timeout(sandbox: Sandbox, language: str) -> None:
    result = await _run(sandbox, language, PROGRAMS[language].loop, limits=SHORT)
    assert result.status is Status.TIMEOUT, result


@pytest.mark.parametrize("language", sorted(SUITES))
async def test_framework_verdict_is_its_exit_code(sandbox: Sandbox, language: str) -> None:
    suite = SUITES[language]
    good = await _run(sandbox, language, suite.passing)
    assert good.status is Status.OK, good
    bad = await _run(sandbox, language, suite.failing)
    assert bad.status is Status.FAILED, bad
    assert bad.exit_code == 1 and suite.marker in bad.stdout + bad.stderr, bad


async def test_junit_compile_error(sandbox: Sandbox) -> None:
    result = await _run(sandbox, "junit", "public class AddTest { void x( }")
    assert result.status is Status.COMPILE_ERROR, result


async def test_typescript_types_are_stripped_not_checked(sandbox: Sandbox) -> None:
    # tsx (Sandbox Fusion's runner) does not type-check: a type error is not a failed run.
    result = await _run(sandbox, "typescript", 'const n: number = "not a number";\nconsole.log("ran");')
    assert (result.status, result.stdout) == (Status.OK, "ran\n"), result


async def test_php_keeps_an_explicit_open_tag(sandbox: Sandbox) -> None:
    result = await _run(sandbox, "php", '\n  <?php echo "tagged\\n";')
    assert (result.status, result.stdout) == (Status.OK, "tagged\n"), result


async def test_d_unittests_run_and_a_failing_one_fails(sandbox: Sandbox) -> None:
    code = "int add(int a, int b) { return a + b%s; }\nunittest { assert(add(1, 2) == 3); }\nvoid main() {}\n"
    assert (await _run(sandbox, "d", code % "")).status is Status.OK
    bad = await _run(sandbox, "d", code % " + 1")
    assert bad.status is Status.FAILED and bad.exit_code == 1, bad


async def test_jest_writes_sandbox_fusions_report(sandbox: Sandbox) -> None:
    # Sandbox Fusion's jest project writes jest-report.json (jest-json-reporter: jest's raw aggregated result),
    # and its clients fetch it and read each case (parse_jest_cases in its test_utils_jest_report).
    code = (
        "describe('math', () => {\n  test('adds', () => { expect(1 + 2).toBe(3); });\n"
        "  describe('inner', () => { test('wrong', () => { expect(2 * 2).toBe(5); }); });\n});\n"
    )
    await _need(sandbox, "jest")
    result = await sandbox.run(RunRequest(code=code, language="jest", fetch_files=["jest-report.json"], limits=ROOMY))
    assert result.status is Status.FAILED and result.exit_code == 1, result
    report = json.loads(result.files["jest-report.json"])
    cases = {c["fullName"]: c for suite in report["testResults"] for c in suite["testResults"]}
    assert {name: c["status"] for name, c in cases.items()} == {"math adds": "passed", "math inner wrong": "failed"}
    assert (
        cases["math inner wrong"]["ancestorTitles"] == ["math", "inner"]
        and cases["math inner wrong"]["failureMessages"]
    )


async def test_csharp_has_dotnets_implicit_usings(sandbox: Sandbox) -> None:
    # Sandbox Fusion's test_csharp_stdin shape: `dotnet new console` turns ImplicitUsings on, so Console, List
    # and LINQ need no using. A #define must stay first, and a using the code repeats is only a warning.
    code = (
        "#define SANDBOXKIT\nusing System;\nclass P { static void Main() {\n"
        "  var xs = new List<int>(Console.ReadLine().Split(' ').Select(int.Parse));\n"
        "  Console.WriteLine(xs.Sum()); } }"
    )
    result = await _run(sandbox, "csharp", code, stdin="1 2 3\n")
    assert (result.status, result.stdout) == (Status.OK, "6\n"), result
    bad = await _run(sandbox, "csharp", "class P { static void Main() {\n  Console.WriteLine(undefined); } }")
    assert bad.status is Status.COMPILE_ERROR and "(2," in bad.compile.stdout + bad.compile.stderr, (
        bad
    )  # line 2 stays line 2


async def test_scala_runs_the_object_it_finds(sandbox: Sandbox) -> None:
    code = 'object Solution { def main(args: Array[String]): Unit = println("from Solution") }'
    result = await _run(sandbox, "scala", code)
    assert (result.status, result.stdout) == (Status.OK, "from Solution\n"), result


@pytest.mark.parametrize("language", UNAVAILABLE)
async def test_uninstallable_language_names_what_to_install(sandbox: Sandbox, language: str) -> None:
    lang = LANGUAGES[language]
    if sandbox.backend_name == "subprocess" and not lang.missing_binaries():
        pytest.skip(f"{language}'s toolchain is installed on this machine")
    with pytest.raises(ToolchainMissing) as caught:
        await sandbox.run(RunRequest(code="", language=language, limits=ROOMY))
    assert lang.install_hint in str(caught.value) and lang.unavailable in str(caught.value)
