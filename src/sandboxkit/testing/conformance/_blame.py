"""Blame through the judge (issue 27): a graded program's own doing ends as a number, never a pass.

In RL a program is graded by the judge over the backend's pool. Two things it must never reach:

* **a dodged zero** — a wrong program that kills its sandbox or exhausts a limit mid-grade must end
  with a failed verdict (reward 0) or, at worst, an honest ``infra_error``; never ``ok`` and never a
  reward above 0. Blame rule (docs/security.md, "Blame"): what the program can cause is its outcome.
* **a judge-side program** — an interactor is the dataset's code. A solution that rewrites the
  interactor's files or plants a ``site`` hook for the next Python process must not turn a wrong
  answer into a pass.

Both go through :func:`sandboxkit.judge.grade` on a pool over the backend under test, so a backend
author checks the judge's guarantees on their own backend, not only on subprocess.
"""

from __future__ import annotations

import pytest

from sandboxkit.base import Backend
from sandboxkit.judge import Verdict, grade
from sandboxkit.pool import SandboxPool
from sandboxkit.testing.conformance._attacks import _killer
from sandboxkit.testing.conformance._base import ConformanceBase

#: Three stdio cases (add one); every attack below prints a wrong answer.
ADD_ONE = [{"stdin": f"{n}\n", "expected_stdout": f"{n + 1}\n"} for n in (0, 1, 2)]

#: Wrong answers that also attack the grading, by name.
DODGERS = {
    "kills its sandbox": _killer(9) + "print(0)\n",
    "exhausts memory": "print(0, flush=True)\nhog = [bytearray(64 << 20) for _ in range(1 << 12)]\n",
    "forks until the pids limit": (
        "import os\nprint(0, flush=True)\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\n"
    ),
}

#: The dataset's interactor: it tells the solution the case's number and accepts only that number plus one.
PLUS_ONE_INTERACTOR = """
import sys
number = int(open(sys.argv[1]).read())
print(number, flush=True)
reply = sys.stdin.readline().strip()
sys.exit(0 if reply == str(number + 1) else 1)
"""
PLUS_ONE_CASES = [{"stdin": f"{n}\n", "expected_stdout": ""} for n in (1, 37, 100)]

#: A wrong solution that rewrites every file it can find under the interactor's folder (and the
#: folder's siblings) with an accept-everything script, and plants a site hook that would make the
#: next Python process exit 0 at once; then never guesses.
TAMPERS_WITH_THE_INTERACTOR = r"""
import os, site, sys
ACCEPT = "import sys, os\nsys.stdin.read()\nos._exit(0)\n"
for root in (".", ".interactor", os.path.expanduser("~")):
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if "interactor" in path or name.startswith("main"):
                try:
                    os.chmod(path, 0o700)
                except OSError:
                    pass
                try:
                    os.remove(path)
                    with open(path, "w") as f:
                        f.write(ACCEPT)
                    os.chmod(path, 0o755)
                except OSError:
                    pass
try:
    hooks = site.getusersitepackages()
    os.makedirs(hooks, exist_ok=True)
    with open(os.path.join(hooks, "zz.pth"), "w") as f:
        f.write("import os, sys; len(sys.argv) > 1 and os._exit(0)\n")
except OSError:
    pass
print("I give up", flush=True)
"""


class BlameTests(ConformanceBase):
    """Through the judge on the backend's pool: attacks end as a 0 (or an honest infra_error), never a pass."""

    def pool(self, backend: Backend) -> SandboxPool:
        return SandboxPool(backend, max_concurrency=2, max_sandboxes=2, limits=self.limits, retries=0)

    @staticmethod
    async def require_python(pool: SandboxPool) -> None:
        """Run one Python program first: an image without Python raises ``ToolchainMissing`` here.

        The judge turns that error into an ``infra_error`` verdict, which would hide the reason; raised
        directly, a conformance class that allows missing toolchains reports the test as skipped.
        """
        await pool.run("print(1)")

    @pytest.mark.timeout(120)
    @pytest.mark.parametrize("attack", sorted(DODGERS))
    async def test_a_wrong_program_that_attacks_its_grading_never_passes(self, backend: Backend, attack: str) -> None:
        self.require_contained()
        async with self.pool(backend) as pool:
            await self.require_python(pool)
            verdict = await grade(pool, DODGERS[attack], ADD_ONE, language="python")
            # The pool still grades a right program afterwards: the attack did not break it for others.
            right = await grade(pool, "print(int(input()) + 1)", ADD_ONE, language="python")
        _assert_not_a_pass(verdict, attack)
        assert (right.status, right.reward) == ("ok", 1.0), right

    @pytest.mark.timeout(120)
    async def test_a_solution_cannot_change_the_interactor(self, backend: Backend) -> None:
        self.require_contained()
        caps = backend.capabilities
        if not caps.stateful or "bash" not in caps.languages:
            pytest.skip("interactive problems need a stateful backend that runs bash")
        tests = {
            "cases": PLUS_ONE_CASES,
            "checker": {"type": "interactor", "language": "python", "code": PLUS_ONE_INTERACTOR},
        }
        async with self.pool(backend) as pool:
            await self.require_python(pool)
            verdict = await grade(pool, TAMPERS_WITH_THE_INTERACTOR, tests, language="python")
            # The same problem passes a right solution: the interactor runs here, so the 0 above is its verdict.
            right = await grade(pool, "print(int(input()) + 1, flush=True)", tests, language="python")
        _assert_not_a_pass(verdict, "tampers with the interactor")
        assert verdict.passed == 0, verdict
        assert (right.status, right.reward) == ("ok", 1.0), right


def _assert_not_a_pass(verdict: Verdict, attack: str) -> None:
    """A 0 is the program's outcome; ``infra_error`` is tolerated as honest but never a reward above 0."""
    assert verdict.status != "ok" and verdict.passed < verdict.total, (attack, verdict)
    if verdict.infra_error:
        assert verdict.reward is None, (attack, verdict)
    else:
        assert verdict.reward == 0.0, (attack, verdict)
