"""Libraries Sandbox Fusion's image bundles, which correct programs import (issue 28, item 7).

A program that imports Perl's ``Data::Compare``, Java's ``javatuples``, Go's ``testify`` or Python's
``matplotlib`` passes under Sandbox Fusion; here it must pass too, on subprocess and on Docker, or a correct
answer scores 0. Go resolves testify as a *module* with the network off (a module cache built at bootstrap),
not from GOPATH. Each library also has a wrong use that must fail as an ordinary failed run, so the check
cannot pass by accident (a missing library is a failed run too, never a pass).

On Docker, go and go_test run only where the image has Go (``SANDBOXKIT_DOCKER_EXTRA_PACKAGES``), as in the
language-table tests; every other row fails under ``CI=true`` when its library is missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from sandboxkit.base import Sandbox
from sandboxkit.models import Limits, RunRequest, Status
from support.local_sandboxes import LOCAL_BACKENDS, local_sandbox

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMITS = Limits(timeout_s=60.0, compile_timeout_s=120.0, memory_mb=1024)
#: Languages the default Docker image leaves out (the language-table tests' rule).
DOCKER_OPT_IN = {"go", "go_test"}


@dataclass(frozen=True)
class Use:
    language: str
    right: str  # a correct program: exits 0 and prints ``expect``
    expect: str
    wrong: str  # the same library used wrongly: a failed run (a failed assertion), not a compile error


PERL = "use Data::Compare;\nmy $same = Compare({a => [1, 2]}, {a => [1, 2]});\n"
JAVA = "import org.javatuples.Pair;\n\npublic class Main {{\n  public static void main(String[] a) {{\n    {body}\n  }}\n}}\n"
GO = 'package main\n\nimport (\n\t"fmt"\n\t"github.com/stretchr/testify/assert"\n)\n\nfunc main() {{\n\t{body}\n}}\n'
GO_TEST = (
    'package main\n\nimport (\n\t"testing"\n\t"github.com/stretchr/testify/assert"\n'
    '\t"github.com/stretchr/testify/require"\n)\n\nfunc TestSum(t *testing.T) {{\n'
    "\trequire.Len(t, []int{{1, 2}}, 2)\n\tassert.Equal(t, {want}, 1+2)\n}}\n"
)
PYTHON = "import matplotlib\nmatplotlib.use('Agg')\nimport io\nimport matplotlib.pyplot as plt\nbuf = io.BytesIO()\n"

USES = {
    "perl-data-compare": Use(
        "perl",
        PERL + 'print $same && !Compare([1], [2]) ? "same\\n" : "differ\\n";\n',
        "same",
        PERL + 'die "differ\\n" unless Compare([1], [2]);\n',
    ),
    "java-javatuples": Use(
        "java",
        JAVA.format(
            body='Pair<Integer, String> p = Pair.with(1, "x");\n    System.out.println(p.getValue1() + p.getValue0());'
        ),
        "x1",
        JAVA.format(body='Pair<Integer, String> p = Pair.with(1, "x");\n    assert p.getValue0() == 2;'),
    ),
    "go-testify": Use(
        "go",
        GO.format(body="fmt.Println(assert.ObjectsAreEqual([]int{1}, []int{1}))"),
        "true",
        GO.format(body='if !assert.ObjectsAreEqual(1, 2) {\n\t\tpanic(fmt.Sprint("differ"))\n\t}'),
    ),
    "go_test-testify": Use("go_test", GO_TEST.format(want=3), "ok", GO_TEST.format(want=4)),
    "python-matplotlib": Use(
        "python",
        PYTHON + "plt.plot([1, 2, 3])\nplt.savefig(buf, format='png')\nprint(buf.getvalue()[:4] == b'\\x89PNG')\n",
        "True",
        PYTHON + "plt.plot([1, 2, 3])\nplt.savefig(buf, format='png')\nassert buf.getvalue() == b''\n",
    ),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=LOCAL_BACKENDS)
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    async for sb in local_sandbox(request.param, LIMITS):
        yield sb


async def _need_toolchain(sandbox: Sandbox, language: str) -> None:
    if sandbox.backend_name == "docker" and language in DOCKER_OPT_IN:
        probe = await sandbox.exec("command -v go", timeout=30)
        if probe.exit_code != 0:
            pytest.skip(f"the Docker image has no Go (opt-in: SANDBOXKIT_DOCKER_EXTRA_PACKAGES={'golang-go'!r})")


@pytest.mark.parametrize("use", sorted(USES))
async def test_a_correct_program_using_the_library_passes(sandbox: Sandbox, use: str) -> None:
    spec = USES[use]
    await _need_toolchain(sandbox, spec.language)
    result = await sandbox.run(RunRequest(code=spec.right, language=spec.language, limits=LIMITS))
    assert result.status is Status.OK, result
    assert spec.expect in result.stdout, result


@pytest.mark.parametrize("use", sorted(USES))
async def test_a_wrong_use_of_the_library_fails_at_run_time(sandbox: Sandbox, use: str) -> None:
    spec = USES[use]
    await _need_toolchain(sandbox, spec.language)
    result = await sandbox.run(RunRequest(code=spec.wrong, language=spec.language, limits=LIMITS))
    assert result.status is Status.FAILED, result  # compiled (the library resolved), then failed its check
