"""Interactive problems end to end on the real subprocess backend: an interactor talks to the solution.

The problem: guess a hidden number in [1, 100] in at most 7 questions. The interactor (C++, testlib's
exit-code contract) reads the secret from its input file, answers ``<``, ``>`` or ``=`` to each guess,
and rejects a solution that runs out of questions or says something that is not a number.
"""

from __future__ import annotations

import os
import shutil

import pytest

from sandboxkit import SandboxPool
from sandboxkit.judge import grade
from support.judge import FAST, needs_gpp, needs_subprocess

pytestmark = needs_subprocess

INTERACTOR = r"""
#include <cstdio>
int main(int argc, char** argv) {
    if (argc < 3) { fprintf(stderr, "usage: interactor input answer\n"); return 3; }
    FILE* in = fopen(argv[1], "r");
    int secret;
    if (!in || fscanf(in, "%d", &secret) != 1) { fprintf(stderr, "bad input file\n"); return 3; }
    for (int q = 0; q < 7; q++) {
        int g;
        if (scanf("%d", &g) != 1) { fprintf(stderr, "expected a number\n"); return 2; }
        if (g == secret) { printf("=\n"); fflush(stdout); return 0; }
        printf(g < secret ? "<\n" : ">\n");
        fflush(stdout);
    }
    fprintf(stderr, "too many questions\n");
    return 1;
}
"""

PY_INTERACTOR = """
import sys
secret = int(open(sys.argv[1]).read())
for _ in range(7):
    g = int(input())
    if g == secret:
        print("=", flush=True)
        sys.exit(0)
    print("<" if g < secret else ">", flush=True)
print("too many questions", file=sys.stderr)
sys.exit(1)
"""

BINARY_SEARCH = """```python
lo, hi = 1, 100
while True:
    mid = (lo + hi) // 2
    print(mid, flush=True)
    r = input().strip()
    if r == "=":
        break
    if r == "<":
        lo = mid + 1
    else:
        hi = mid - 1
```"""

BINARY_SEARCH_CPP = """```cpp
#include <cstdio>
int main() {
    int lo = 1, hi = 100;
    char r[4];
    while (true) {
        int mid = (lo + hi) / 2;
        printf("%d\\n", mid); fflush(stdout);
        if (scanf("%3s", r) != 1) return 1;
        if (r[0] == '=') return 0;
        if (r[0] == '<') lo = mid + 1; else hi = mid - 1;
    }
}
```"""

LINEAR = """```python
for g in range(1, 101):
    print(g, flush=True)
    if input().strip() == "=":
        break
```"""

#: Reads the hidden input and answer files instead of asking: must find nothing to read.
PEEK = """```python
import glob, os
secret = None
for path in glob.glob(".*") + glob.glob("*") + glob.glob("/proc/*/fd/*"):
    try:
        if not os.path.isfile(path):  # never block on a FIFO or a pipe
            continue
        text = open(path).read().strip()
    except Exception:
        continue
    if text.isdigit():
        secret = int(text)
        break
print(secret if secret is not None else 1, flush=True)
input()
```"""

#: Writes a forged "accepted" result line to the launcher's stdout, then gives a wrong answer.
FORGE = """```python
import os
with open(f"/proc/{os.getppid()}/fd/1", "w") as f:
    f.write("@@sandboxkit-interact@@ 0 0\\n")
print(1, flush=True)
```"""

#: Kills the interactor, hoping a dead judge means "no reward" instead of 0.
KILL_JUDGE = """```python
import os, signal
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"interactor" in cmd or b"main" in cmd.split(b"\\0")[0]:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
input()
```"""

CASES = [{"stdin": f"{n}\n", "expected_stdout": ""} for n in (1, 37, 100)]


def suite(language: str = "cpp", code: str = INTERACTOR) -> dict[str, object]:
    return {"cases": CASES, "checker": {"type": "interactor", "language": language, "code": code}}


@pytest.fixture
async def pool() -> SandboxPool:  # type: ignore[misc]
    async with SandboxPool("subprocess", max_concurrency=2, limits=FAST) as p:
        yield p


@needs_gpp
async def test_a_right_solution_passes_every_case(pool: SandboxPool) -> None:
    verdict = await grade(pool, BINARY_SEARCH, suite())
    assert verdict.status == "ok", verdict
    assert verdict.reward == 1.0 and verdict.passed == 3


@needs_gpp
async def test_a_compiled_solution_passes_too(pool: SandboxPool) -> None:
    verdict = await grade(pool, BINARY_SEARCH_CPP, suite(), language="cpp")
    assert verdict.status == "ok", verdict


async def test_a_python_interactor_works(pool: SandboxPool) -> None:
    verdict = await grade(pool, BINARY_SEARCH, suite("python", PY_INTERACTOR))
    assert verdict.status == "ok", verdict


@needs_gpp
async def test_too_many_questions_is_a_wrong_answer(pool: SandboxPool) -> None:
    verdict = await grade(pool, LINEAR, suite())
    statuses = [c.status for c in verdict.cases]
    assert statuses[0] == "passed"  # the secret 1 is found by the first question
    assert statuses[1:] == ["wrong_answer", "wrong_answer"]
    assert "too many questions" in verdict.cases[1].message
    assert verdict.reward == pytest.approx(1 / 3)


@pytest.mark.parametrize("language", ["cpp", "python"])
async def test_the_solution_cannot_read_the_hidden_files(pool: SandboxPool, language: str) -> None:
    # Removing the files before the solution starts, running a compiled interactor from an execute-only
    # file, and making a Python one non-dumpable (then waiting for it) are each needed: without any one
    # of them this solution finds the secret and passes.
    if language == "cpp" and shutil.which("g++") is None and os.environ.get("CI") != "true":
        pytest.skip("g++ is not installed")
    checker = suite(language, INTERACTOR if language == "cpp" else PY_INTERACTOR)["checker"]
    verdict = await grade(pool, PEEK, {"cases": CASES[1:2], "checker": checker})
    assert verdict.reward == 0.0, verdict


@needs_gpp
async def test_a_forged_result_line_does_not_pass(pool: SandboxPool) -> None:
    verdict = await grade(pool, FORGE, {"cases": CASES[1:2], "checker": suite()["checker"]})
    assert verdict.reward == 0.0 and verdict.status != "infra_error", verdict


@needs_gpp
async def test_killing_the_interactor_scores_zero_not_none(pool: SandboxPool) -> None:
    verdict = await grade(pool, KILL_JUDGE, {"cases": CASES[1:2], "checker": suite()["checker"]})
    assert verdict.reward == 0.0 and verdict.status != "infra_error", verdict


@needs_gpp
async def test_a_solution_that_never_answers_times_out(pool: SandboxPool) -> None:
    verdict = await grade(pool, "```python\nimport time\ntime.sleep(60)\n```", suite(), timeout_s=1)
    assert verdict.cases[0].status == "timeout", verdict


@needs_gpp
async def test_a_solution_compile_error_fails_every_case(pool: SandboxPool) -> None:
    verdict = await grade(pool, "```cpp\nint main( {\n```", suite(), language="cpp")
    assert verdict.status == "compile_error" and verdict.reward == 0.0


async def test_an_interactor_that_does_not_compile_gives_no_reward(pool: SandboxPool) -> None:
    verdict = await grade(pool, BINARY_SEARCH, suite("cpp", "int main( {"))
    assert verdict.status == "infra_error" and verdict.reward is None
    assert "interactor" in (verdict.error or "")


async def test_an_interactor_failing_itself_gives_no_reward(pool: SandboxPool) -> None:
    broken = "import sys\nsys.exit(3)\n"
    verdict = await grade(pool, BINARY_SEARCH, suite("python", broken))
    assert verdict.status == "infra_error" and verdict.reward is None


async def test_languages_that_cannot_run_interactively_are_invalid(pool: SandboxPool) -> None:
    verdict = await grade(pool, "```java\nclass Main {}\n```", suite(), language="java")
    assert verdict.status == "invalid" and "java" in (verdict.error or "")


async def test_an_interactive_problem_needs_stdio_cases(pool: SandboxPool) -> None:
    tests = {"cases": [{"type": "assert", "code": "assert True"}], "checker": suite()["checker"]}
    verdict = await grade(pool, BINARY_SEARCH, tests)
    assert verdict.status == "invalid" and "stdio" in (verdict.error or "")


@pytest.mark.docker
async def test_on_docker_right_passes_and_peeking_or_forging_does_not(docker_pool: SandboxPool) -> None:
    checker = suite("python", PY_INTERACTOR)["checker"]
    right = await grade(docker_pool, BINARY_SEARCH, {"cases": CASES, "checker": checker})
    assert right.status == "ok", right
    for cheat in (PEEK, FORGE, LINEAR):
        verdict = await grade(docker_pool, cheat, {"cases": CASES[1:2], "checker": checker})
        assert verdict.reward == 0.0 and verdict.status != "infra_error", (cheat, verdict)


async def test_an_interactor_that_stays_readable_never_lets_the_solution_start(pool: SandboxPool) -> None:
    # The launcher starts the solution only once the interactor is non-dumpable; one that makes itself
    # dumpable again (as a slow start on a loaded machine would leave it) is the judge's failure: no
    # reward, and the peeking solution never runs (before, it started after 2 s anyway and could pass).
    readable = "__import__('ctypes').CDLL(None).prctl(4, 1, 0, 0, 0)\nimport time\ntime.sleep(30)\n" + PY_INTERACTOR
    verdict = await grade(pool, PEEK, {"cases": CASES[1:2], "checker": suite("python", readable)["checker"]})
    assert verdict.status == "infra_error" and verdict.reward is None, verdict
    assert "had not yet hidden its files" in (verdict.error or "") or "did not hide its files" in (
        verdict.error or ""
    ), verdict.error


async def test_a_time_limit_that_ends_the_hide_wait_is_the_judges_failure_not_a_timeout(pool: SandboxPool) -> None:
    # On a loaded machine the run's time limit can end while the launcher still waits for the interactor
    # to hide its files: the solution never ran, so it is no reward, not a 0 (before: ``timeout``).
    readable = "__import__('ctypes').CDLL(None).prctl(4, 1, 0, 0, 0)\nimport time\ntime.sleep(30)\n" + PY_INTERACTOR
    checker = {**suite("python", readable)["checker"], "timeout_s": 1.0}
    verdict = await grade(pool, PEEK, {"cases": CASES[1:2], "checker": checker}, timeout_s=1)
    assert verdict.status == "infra_error" and verdict.reward is None, verdict
    assert "had not yet hidden its files" in (verdict.error or ""), verdict.error


#: A wrong compiled solution that, run without the interactor's arguments (its compile-and-probe run, or
#: any case), puts a copy of itself in the interactor's place; run as the interactor (``main input
#: answer``) it waits for the solution to finish and accepts. Execute-only, so it turns non-dumpable.
SWAPS_THE_INTERACTOR = """```cpp
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char** argv) {
    char buf[4096];
    if (argc >= 3) {  // running as the "interactor": accept whatever the solution does
        while (read(0, buf, sizeof buf) > 0) {}
        return 0;
    }
    int in = open("/proc/self/exe", O_RDONLY);
    unlink(".interactor/main");
    int out = open(".interactor/main", O_WRONLY | O_CREAT | O_TRUNC, 0700);
    ssize_t n;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0) write(out, buf, n);
    close(out);
    chmod(".interactor/main", 0111);
    return 0;
}
```"""

#: A wrong Python solution that rewrites a Python interactor (and plants a module next to it) for later cases.
REWRITES_THE_INTERACTOR = """```python
import os
fake = ("__import__('ctypes').CDLL(None).prctl(4, 0, 0, 0, 0)\\n"
        "import sys\\nsys.stdin.read()\\nsys.exit(0)\\n")
for name in os.listdir(".interactor"):
    path = os.path.join(".interactor", name)
    os.chmod(path, 0o700)
    with open(path, "w") as f:
        f.write(fake)
with open(os.path.join(".interactor", "json.py"), "w") as f:
    f.write(fake)
```"""


@needs_gpp
async def test_a_compiled_solution_cannot_swap_in_its_own_interactor(pool: SandboxPool) -> None:
    # Was: the solution's probe run replaced .interactor/main and this wrong solution passed 3/3.
    verdict = await grade(pool, SWAPS_THE_INTERACTOR, suite(), language="cpp", shaping="all_or_nothing")
    assert (verdict.reward, verdict.passed, verdict.infra_error) == (0.0, 0, False), verdict
    assert "interactor" in verdict.cases[0].message, verdict.cases[0]


async def test_a_solution_cannot_rewrite_a_python_interactor_for_later_cases(pool: SandboxPool) -> None:
    # Was: case 0 failed, then cases 1 and 2 ran the solution's "interactor" and passed (reward 2/3).
    verdict = await grade(pool, REWRITES_THE_INTERACTOR, suite("python", "import json\n" + PY_INTERACTOR))
    assert (verdict.reward, verdict.passed, verdict.infra_error) == (0.0, 0, False), verdict


#: Finds the secret, then kills everything in its sandbox (the fork server too) when it was 37.
FINDS_THEN_KILLS = BINARY_SEARCH.removesuffix("```") + (
    "if mid == 37:\n    import os, signal\n    os.kill(-1, signal.SIGKILL)\n```"
)


async def test_a_solution_that_kills_its_sandbox_fails_that_case_only(pool: SandboxPool) -> None:
    # Was: the next case's run raised SandboxCrashed and the verdict was infra_error (reward None).
    verdict = await grade(pool, FINDS_THEN_KILLS, suite("python", PY_INTERACTOR))
    assert [c.status for c in verdict.cases] == ["passed", "error", "passed"], verdict
    assert (verdict.reward, verdict.infra_error) == (pytest.approx(2 / 3), False)


@pytest.mark.docker
async def test_on_docker_the_solution_cannot_change_the_interactor(docker_pool: SandboxPool) -> None:
    swapped = await grade(docker_pool, SWAPS_THE_INTERACTOR, suite(), language="cpp", shaping="all_or_nothing")
    rewritten = await grade(docker_pool, REWRITES_THE_INTERACTOR, suite("python", "import json\n" + PY_INTERACTOR))
    right = await grade(docker_pool, BINARY_SEARCH_CPP, suite(), language="cpp")
    assert (swapped.reward, swapped.infra_error, rewritten.reward, rewritten.infra_error) == (0.0, False, 0.0, False)
    assert right.status == "ok", right


#: A wrong Python solution that plants a start-up hook in the user's site-packages (HOME is the
#: workspace on Docker): every later Python process of the sandbox, the interactor too, would run it.
PLANTS_A_SITE_HOOK = """```python
import os, site, sys
hook = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "
        "len(sys.argv) > 2 and (sys.stdin.read(), os._exit(0))\\n")
path = site.getusersitepackages()
os.makedirs(path, exist_ok=True)
with open(os.path.join(path, "zz.pth"), "w") as f:
    f.write(hook)
```"""


async def test_a_site_hook_never_runs_in_the_interactor(pool: SandboxPool) -> None:
    # Was: cases 1 and 2 ran the hook instead of the interactor and passed (reward 2/3), here and on Docker.
    verdict = await grade(pool, PLANTS_A_SITE_HOOK, suite("python", PY_INTERACTOR))
    assert (verdict.reward, verdict.passed, verdict.infra_error) == (0.0, 0, False), verdict


@pytest.mark.docker
async def test_on_docker_a_site_hook_never_runs_in_the_interactor(docker_pool: SandboxPool) -> None:
    await test_a_site_hook_never_runs_in_the_interactor(docker_pool)


#: An interactor that crashes (as a Rust one's ``unwrap()`` exits 101) on a guess that is not a number.
CRASHES_ON_GARBAGE = PY_INTERACTOR.replace(
    "g = int(input())", "line = input()\n    g = int(line) if line.strip().isdigit() else sys.exit(101)"
)


async def test_an_interactor_crashing_on_the_solutions_garbage_is_a_wrong_answer(pool: SandboxPool) -> None:
    # Was: exit code 101 -> checker_failed -> infra_error -> None, so printing garbage dodged the 0.
    verdict = await grade(pool, "```python\nprint('abc', flush=True)\n```", suite("python", CRASHES_ON_GARBAGE))
    assert (verdict.status, verdict.reward, verdict.infra_error) == ("failed", 0.0, False), verdict
    assert "exit code 101" in verdict.cases[0].message
    assert (await grade(pool, BINARY_SEARCH, suite("python", CRASHES_ON_GARBAGE))).reward == 1.0
