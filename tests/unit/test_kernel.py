"""The kernel's host side without a sandbox: capability refusal, bad kernels, the result's text.

A "kernel" here is a real local process (``python3 -c``) behind a :class:`PipeLink`, so the
client's framing, start-up checks and dead-kernel handling run against real pipes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxkit import InvalidRequest, SandboxCrashed, SandboxPool
from sandboxkit.kernel import CellResult, CellStatus, Kernel, PipeLink, describe_shell, kernel_argv
from sandboxkit.models import Limits
from sandboxkit.testing import FakeBackend
from support.marks import missing

LIMITS = Limits(timeout_s=5.0)


def _local(argv: list[str], env: dict[str, str] | None = None) -> PipeLink:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, env=env)

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    return PipeLink(proc, kill)


def _kernel(argv: list[str], env: dict[str, str] | None = None) -> Kernel:
    async def start() -> PipeLink:
        return _local(argv, env)

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


# ---------------------------------------------------------------------- IPython mode

#: The sandboxes' Python (subprocess backend, Docker image): the one that must have IPython.
SANDBOX_PYTHON = "/usr/bin/python3"


def _sandbox_python_with_ipython() -> str:
    probe = subprocess.run([SANDBOX_PYTHON, "-I", "-c", "import IPython"], capture_output=True, check=False)
    if probe.returncode != 0:
        missing(f"{SANDBOX_PYTHON} has no IPython (scripts/toolchains.sh installs python3-ipython)")
    return SANDBOX_PYTHON


async def test_ipython_cells_behave_as_in_jupyter(tmp_path: Path) -> None:
    """display(), %time, !echo, a trailing ; and top-level await: what Sandbox Fusion's ipykernel gives."""
    python = _sandbox_python_with_ipython()
    kernel = _kernel(kernel_argv(python, LIMITS), env={**os.environ, "HOME": str(tmp_path)})
    try:
        shown = await kernel.run("from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))\n1 + 1")
        assert shown.ok and shown.shell == "ipython" and kernel.shell == "ipython", shown
        assert shown.display == [
            {"text/plain": "<IPython.core.display.HTML object>", "text/html": "<b>hi</b>"},
            {"text/plain": "2"},
        ]
        assert shown.value == "2"
        timed = await kernel.run("%time total = sum(range(10))")
        assert timed.ok and "Wall time: " in timed.stdout and timed.value is None, timed
        echoed = await kernel.run("!echo from-shell")
        assert echoed.ok and echoed.stdout == "from-shell\n", echoed
        silenced = await kernel.run("total;")
        assert silenced.ok and silenced.value is None and silenced.display == [], silenced
        awaited = await kernel.run("import asyncio\nawait asyncio.sleep(0)\ntotal")
        assert awaited.ok and awaited.value == "45", awaited
        png = await kernel.run("display({'image/png': b'\\x89PNG\\r\\n\\x1a\\nfake', 'text/plain': 'img'}, raw=True)")
        assert png.ok and png.display == [{"image/png": "iVBORw0KGgpmYWtl", "text/plain": "img"}], png  # base64
        # Errors read as in plain mode: the cell's frames, its source, never the kernel's.
        error = await kernel.run("def boom():\n    return 1 / 0\n\nboom()")
        assert error.error_name == "ZeroDivisionError" and error.traceback is not None, error
        assert error.traceback.startswith('Traceback (most recent call last):\n  File "<cell ')
        assert "return 1 / 0" in error.traceback and "IPython" not in error.traceback, error.traceback
        bad_magic = await kernel.run("%nosuchmagic")
        assert bad_magic.error_name == "UsageError" and bad_magic.traceback == (
            "IPython.core.error.UsageError: Line magic function `%nosuchmagic` not found.\n"
        ), bad_magic
        # No history database, no profile or config read or written in a home directory.
        where = await kernel.run(
            "import os\nip = get_ipython()\n"
            "(str(ip.history_manager.hist_file), ip.ipython_dir.startswith('/tmp/sandboxkit-ipython-'), "
            "[f for _, _, fs in os.walk(ip.ipython_dir) for f in fs if f != 'README'])"
        )
        assert where.value == "(':memory:', True, [])", where
        assert list(tmp_path.iterdir()) == []
    finally:
        await kernel.close()


async def test_plain_python_mode_stays_available() -> None:
    """shell="python" (and a sandbox Python without IPython) runs cells as plain Python, and says so."""
    kernel = _kernel(kernel_argv(sys.executable, LIMITS, shell="python"))
    try:
        plain = await kernel.run("1 + 1")
        assert plain.shell == "python" and kernel.shell == "python", plain
        assert plain.value == "2" and plain.display == [{"text/plain": "2"}], plain
        magic = await kernel.run("!echo hi")
        assert magic.error_name == "SyntaxError", magic
    finally:
        await kernel.close()


async def test_rich_outputs_are_capped_whole() -> None:
    """A display bundle past the output cap keeps only its cut text/plain: never half an image."""
    python = _sandbox_python_with_ipython()
    small = LIMITS.merged(output_bytes=4096)

    async def start() -> PipeLink:
        return _local(kernel_argv(python, small))

    kernel = Kernel(start, small, backend="local", sandbox_id="test")
    try:
        big = await kernel.run(
            "from IPython.display import display\n"
            "for _ in range(3):\n    display({'image/png': b'x' * 1000, 'text/plain': 'y' * 1000}, raw=True)"
        )
        assert big.ok and big.truncated, big
        assert len(json.dumps(big.display)) <= 4096 + 256, big.display
        assert "image/png" in big.display[0] and all(set(b) == {"text/plain"} for b in big.display[1:]), big.display
    finally:
        await kernel.close()


async def test_ipython_directory_goes_with_the_kernel() -> None:
    """The kernel's private IPython directory is removed when the host closes the kernel's stdin."""
    kernel = _kernel(kernel_argv(_sandbox_python_with_ipython(), LIMITS))
    try:
        where = await kernel.run("get_ipython().ipython_dir")
        assert where.value is not None and os.path.isdir(where.value[1:-1]), where
        link = kernel._link
        assert isinstance(link, PipeLink) and link.proc.stdin is not None
        link.proc.stdin.close()
        assert link.proc.wait(10) == 0
        assert not os.path.exists(where.value[1:-1])
    finally:
        await kernel.close()


def test_doctor_says_how_kernels_run_cells() -> None:
    assert describe_shell(None).startswith("none")
    assert describe_shell(_sandbox_python_with_ipython()).startswith("IPython ")
    assert describe_shell(sys.executable + "-absent").startswith("unknown")


def test_adapters_show_rich_outputs_as_text() -> None:
    """What the model reads: each bundle's text/plain, a note for what has none, the value once."""
    from sandboxkit.integrations._cells import format_cell

    result = CellResult(
        status=CellStatus.OK,
        stdout="out\n",
        value="42",
        display=[{"text/html": "<b>x</b>", "text/plain": "<HTML>"}, {"image/png": "iVBO"}, {"text/plain": "42"}],
    )
    assert format_cell(result) == "out\n<HTML>\n[image/png output]\n42"
    assert result.text() == "out\n<HTML>\n[image/png output]\n42\n"
