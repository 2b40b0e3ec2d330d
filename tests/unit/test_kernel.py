"""The kernel's host side without a sandbox: capability refusal, bad kernels, the result's text.

A "kernel" here is a real local process (``python3 -c``) behind a :class:`PipeLink`, so the
client's framing, start-up checks and dead-kernel handling run against real pipes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sandboxkit import InvalidRequest, SandboxCrashed, SandboxPool
from sandboxkit.kernel import CellResult, CellStatus, Kernel, PipeLink, kernel_argv
from sandboxkit.models import Limits
from sandboxkit.testing import FakeBackend

LIMITS = Limits(timeout_s=5.0)


def _local(argv: list[str]) -> PipeLink:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    return PipeLink(proc, kill)


def _kernel(argv: list[str]) -> Kernel:
    async def start() -> PipeLink:
        return _local(argv)

    return Kernel(start, LIMITS, backend="local", sandbox_id="test")


async def test_backends_without_kernels_refuse_clearly() -> None:
    async with SandboxPool(FakeBackend(), limits=LIMITS) as pool, pool.session() as session:
        with pytest.raises(InvalidRequest, match="no Python kernels"):
            await session.python("1")
        sandbox = await pool._core.backend.open(LIMITS)
        with pytest.raises(InvalidRequest, match=r"capabilities\.kernels"):
            await sandbox.open_kernel()
        await sandbox.close()


async def test_a_kernel_that_does_not_start_is_sandbox_crashed() -> None:
    for argv in ([sys.executable, "-c", "pass"], [sys.executable, "-c", "print('nonsense', flush=True)"]):
        kernel = _kernel(argv)
        with pytest.raises(SandboxCrashed, match="did not start"):
            await kernel.run("1")


async def test_local_kernel_round_trip_and_death_between_cells() -> None:
    kernel = _kernel(kernel_argv(sys.executable, LIMITS))
    try:
        assert (await kernel.run("a = 2")).ok
        assert (await kernel.run("a * 21")).value == "42"
        link = kernel._link
        assert isinstance(link, PipeLink)
        os.killpg(link.proc.pid, signal.SIGKILL)
        link.proc.wait(5)
        after = await kernel.run("'a' in dir()")
        assert after.value == "False" and after.state_lost and after.restarted and kernel.starts == 2
    finally:
        await kernel.close()
    with pytest.raises(SandboxCrashed):
        await kernel.run("1")


def test_result_text_is_what_a_notebook_shows() -> None:
    ok = CellResult(status=CellStatus.OK, stdout="out", value="42")
    assert ok.ok and ok.text() == "out\n42\n"
    err = CellResult(
        status=CellStatus.ERROR, stderr="warn\n", error_name="E", error_value="v", traceback="Traceback\nE: v\n"
    )
    assert not err.ok and err.text() == "warn\nTraceback\nE: v\n"
    died = CellResult(status=CellStatus.CRASHED, error_name="KernelDied", error_value="exited with code 3")
    assert died.text() == "KernelDied: exited with code 3\n"
    assert CellResult.model_validate_json(err.model_dump_json()) == err
