"""The Docker backend's Python kernel: ``docker exec`` inside the sandbox's container, as its user.

One container serves the shared checks (``support.kernels``); ``docker top`` shows what runs in
it, so the tests can see that a cell's processes, and the kernel on reset and close, are gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit.kernel import CellStatus
from support import kernels
from support.docker_engine import FAST, processes
from support.marks import missing

SMALL = FAST.merged(output_bytes=4096, output_stop_bytes=1 << 20)


@pytest.fixture
async def small(backend: Any) -> AsyncIterator[Any]:
    sb = await backend.open(SMALL)
    try:
        yield sb
    finally:
        await sb.close()


def _kernel_processes(client: Any, sb: Any) -> list[list[str]]:
    return [p for p in processes(client, sb.container_id) if "stateful Python kernel" in p[-1] or "sleep" in p[-1]]


async def test_state_rendering_and_isolation(sandbox: Any) -> None:
    assert sandbox._backend.capabilities.kernels
    await kernels.check_state_and_rendering(sandbox)
    probe = await kernels.cell(sandbox, "import os\n(os.getuid(), os.getcwd(), 'SECRET' in os.environ)")
    assert probe.value == f"(1000, {sandbox._workdir!r}, False)", probe


async def test_ipython_mode_or_clean_fallback(sandbox: Any) -> None:
    """The image's python3 decides: IPython cells with it, plain Python (said so) without it."""
    if not await kernels.check_shell_mode(sandbox):
        missing("the Docker image's python3 has no IPython (rebuild it: scripts/docker-setup.sh); fallback checked")


async def test_hostile_cells(small: Any, docker_client: Any) -> None:
    await kernels.check_hostile_cells(small, memory_status=(CellStatus.CRASHED, CellStatus.ERROR))
    names = [p[-1] for p in _kernel_processes(docker_client, small)]
    assert len(names) == 2, names  # the supervisor and its worker, nothing a cell started


async def test_pids_come_back(small: Any) -> None:
    assert SMALL.pids is not None
    await kernels.check_pids_come_back(small, SMALL.pids)


async def test_output_limits_and_fresh(small: Any) -> None:
    await kernels.check_output_limits(small, SMALL.output_bytes)
    await kernels.check_fresh(small)


async def test_reset_and_close_kill_the_kernel(sandbox: Any, docker_client: Any) -> None:
    kernel = await sandbox.open_kernel()
    assert (await kernel.run("x = 1")).ok
    assert len(_kernel_processes(docker_client, sandbox)) == 2
    assert await sandbox.reset()
    assert _kernel_processes(docker_client, sandbox) == []
    assert kernel.closed
    fresh = await kernels.cell(sandbox, "'x' in dir()")
    assert fresh.value == "False" and not fresh.restarted, fresh
    # A sandbox command that kills every process (a timed-out run sweeps the container) takes the
    # kernel with it: the next cell says so.
    swept = await sandbox.exec("kill -9 -1; sleep 1", timeout=5)
    assert swept is not None
    lost = await kernels.cell(sandbox, "'x' in dir()")
    assert lost.ok and lost.state_lost and lost.restarted, lost


async def test_stopped_supervisor(sandbox: Any, docker_client: Any) -> None:
    await kernels.check_stopped_supervisor(sandbox)
    assert len(_kernel_processes(docker_client, sandbox)) == 2, "the stopped kernel was left behind"
