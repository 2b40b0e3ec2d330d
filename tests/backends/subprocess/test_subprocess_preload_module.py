"""``preload_python_module``: sandboxkit's own modules held by the fork server, run before any program.

The judge's isolated harness rides on it (a run then executes only its per-run part). What must hold:
the module is defined once, in the server, never by a run; a program cannot change it for later runs;
a server started before the module was registered gets it at the next tenant, never mid-tenant (a
tenant's ``/tmp`` lives as long as its server); a module that cannot load leaves the server serving.
"""

from __future__ import annotations

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend, SubprocessSandbox
from sandboxkit.base import Backend
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import RunRequest, Status
from support.subprocess_sandboxes import FAST, RecordingBackend

MODULE = "_sandboxkit_test_module"
#: Records the process that ran the module's body, and counts calls of its function.
SOURCE = "import os\nLOADED_IN = os.getpid()\nCALLS = []\n\ndef triple(x):\n    CALLS.append(x)\n    return 3 * x\n"
PROBE = (
    "import os, sys\n"
    f"m = sys.modules.get({MODULE!r})\n"
    "print('absent' if m is None else (m.triple(14), len(m.CALLS), m.LOADED_IN != os.getpid()))\n"
)


def _req(code: str) -> RunRequest:
    return RunRequest(code=code, limits=FAST)


async def test_a_registered_module_is_loaded_once_in_the_server_for_every_run(backend: RecordingBackend) -> None:
    assert backend.preload_python_module(MODULE, SOURCE) is True
    sandbox = await backend.open(FAST)
    try:
        for _ in range(2):  # the second run sees no trace of the first one's call
            result = await sandbox.run(_req(PROBE))
            assert result.stdout == "(42, 1, True)\n", result
    finally:
        await sandbox.close()


async def test_a_program_cannot_change_the_module_for_later_runs(backend: RecordingBackend) -> None:
    backend.preload_python_module(MODULE, SOURCE)
    sandbox = await backend.open(FAST)
    try:
        tamper = f"import sys\nm = sys.modules[{MODULE!r}]\nm.triple = lambda x: 0\nm.CALLS.extend(range(9))\n"
        assert (await sandbox.run(_req(tamper))).status is Status.OK
        await sandbox.reset()
        result = await sandbox.run(_req(PROBE))
        assert result.stdout == "(42, 1, True)\n", result
    finally:
        await sandbox.close()


async def test_a_running_server_gets_the_module_at_the_next_tenant_not_mid_tenant(sandbox: SubprocessSandbox) -> None:
    backend = sandbox._backend
    kept = await sandbox.run(_req("open('/tmp/mine', 'w').write('kept')"))
    assert kept.status is Status.OK, kept
    backend.preload_python_module(MODULE, SOURCE)
    same_tenant = await sandbox.run(_req(PROBE + "print(open('/tmp/mine').read())"))
    assert same_tenant.stdout == "absent\nkept\n", same_tenant  # not restarted under the tenant's feet
    await sandbox.reset()
    next_tenant = await sandbox.run(_req(PROBE))
    assert next_tenant.stdout == "(42, 1, True)\n", next_tenant


@pytest.mark.parametrize(
    "source",
    ["def broken(:\n", "raise RuntimeError('refuses to load')\n", "import sys\nsys.exit(3)\n"],
    ids=["syntax-error", "raises", "exits"],
)
async def test_a_module_that_cannot_load_is_left_out_and_the_server_serves(
    backend: RecordingBackend, source: str
) -> None:
    assert backend.preload_python_module(MODULE, source) is True  # a promise to load, not of success
    sandbox = await backend.open(FAST)
    try:
        result = await sandbox.run(_req(PROBE))
        assert result.status is Status.OK and result.stdout == "absent\n", result
    finally:
        await sandbox.close()


async def test_a_module_name_must_be_an_identifier(backend: RecordingBackend) -> None:
    for bad in ("", "a.b", "1x", "x y"):
        with pytest.raises(InvalidRequest, match="identifier"):
            backend.preload_python_module(bad, SOURCE)


async def test_without_a_warm_interpreter_there_is_no_module_to_hold() -> None:
    backend = SubprocessBackend(warm_python=False)
    try:
        assert backend.preload_python_module(MODULE, SOURCE) is False
    finally:
        await backend.aclose()


def test_a_backend_holds_no_module_unless_it_says_so() -> None:
    # The Backend contract's default (docker and the HTTP backends keep it): programs carry their code.
    from sandboxkit.backends.docker import DockerBackend

    assert DockerBackend.preload_python_module is Backend.preload_python_module
    assert Backend.preload_python_module(object.__new__(DockerBackend), MODULE, SOURCE) is False
