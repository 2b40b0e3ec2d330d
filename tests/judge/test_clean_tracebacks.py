"""No graded result shows sandboxkit's machinery: tracebacks name only the user's frames and ``main.py``.

The model reads tool output and reward logs; a frame of the fork server or of the judge's harness
(``_run_python``, ``_child_stdio``, ``<string>``, a path under ``sandboxkit/``) would be noise it could
learn from, and Sandbox Fusion never shows one. Checked on every path a Python error takes: a plain
``pool.run`` on each backend available here, and the judge's harness (stdio, call and assert cases).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import pytest

from sandboxkit import SandboxPool
from sandboxkit.judge import grade
from sandboxkit.judge.cases import StdioCase
from sandboxkit.judge.harness import build_python_harness, parse_harness_output
from support.judge import FAST, needs_subprocess
from support.marks import missing

#: Anything that would reveal sandboxkit's own code in a traceback.
LEAKS = re.compile(r"sandboxkit|_run_python|_child_\w+|_server_main|<string>|_schedule|_start\b|exec\(_CODE")

PROGRAM = "def inner(x):\n    return 1 // x\n\ndef outer():\n    return inner(0)\n\nouter()\n"


def _docker_usable() -> bool:
    try:
        from sandboxkit.backends.docker import DockerBackend
    except Exception:
        return False
    return bool(DockerBackend.availability().usable)


@pytest.fixture(params=["subprocess", pytest.param("docker", marks=pytest.mark.docker)])
async def any_pool(request: pytest.FixtureRequest) -> AsyncIterator[SandboxPool]:
    if request.param == "docker":
        if not _docker_usable():
            missing("the docker backend is not usable here")  # skip locally, fail under CI=true
        from sandboxkit.backends.docker import DockerBackend

        backend = DockerBackend(labels={"sandboxkit.test": uuid.uuid4().hex})
        try:
            async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
                yield pool
        finally:
            await backend.aclose()
        return
    async with SandboxPool("subprocess", max_concurrency=1, limits=FAST) as pool:
        yield pool


@needs_subprocess
async def test_a_plain_run_shows_only_the_users_frames(any_pool: SandboxPool) -> None:
    result = await any_pool.run(PROGRAM, language="python")
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', result.stderr)
    assert [(name.rsplit("/", 1)[-1], fn) for name, _, fn in frames] == [
        ("main.py", "<module>"),
        ("main.py", "outer"),
        ("main.py", "inner"),
    ], result.stderr
    assert "ZeroDivisionError" in result.stderr and not LEAKS.search(result.stderr), result.stderr


def test_the_harness_stdio_traceback_shows_only_the_users_frames(tmp_path: object) -> None:
    import subprocess
    import sys

    script = build_python_harness(PROGRAM, [StdioCase(stdin="")], timeout_s=5)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    item = parse_harness_output(done.stdout).results[0]
    stderr = str(item["stderr"])
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', stderr)
    assert [fn for _, _, fn in frames] == ["<module>", "outer", "inner"], stderr
    assert all(name == "main.py" for name, _, _ in frames) and not LEAKS.search(stderr), stderr


@needs_subprocess
async def test_graded_messages_name_no_sandboxkit_frame() -> None:
    async with SandboxPool("subprocess", max_concurrency=2, limits=FAST) as pool:
        code = "```python\n" + PROGRAM.replace("outer()\n", "") + "```"
        stdio = await grade(pool, "```python\n" + PROGRAM + "```", [{"stdin": "", "expected_stdout": "1\n"}])
        call = await grade(pool, code, [{"fn_name": "outer", "args": [], "expected": 1}])
        asserted = await grade(pool, code, [{"type": "assert", "code": "assert outer() == 1"}])
    for verdict in (stdio, call, asserted):
        assert verdict.status == "failed" and verdict.error is not None, verdict
        assert "ZeroDivisionError" in verdict.error and not LEAKS.search(verdict.error), verdict.error
    assert "main.py line 2" in str(call.error)
