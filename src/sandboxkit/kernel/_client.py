"""Host side of a stateful Python kernel: framing, the host's own timeout, restarts that say so.

A backend starts the in-sandbox program (``_kernel_main``, passed as ``python3 -I -u -c``)
with every protection its commands get, and hands :class:`Kernel` a :class:`KernelLink`: a
byte pipe to the program's stdin and stdout, and a way to kill all of it. Everything else is
here, identical for every backend:

* one cell at a time, each a framed JSON request answered by one framed JSON reply;
* the in-sandbox supervisor enforces the cell's timeout; the host keeps its own timer
  (``timeout + GRACE_S``) in case the supervisor itself was stopped or starved, and then
  kills the whole kernel;
* a kernel found dead between cells (killed by a sandbox command, a reset, a fork that could
  not carry process memory) is started again, and the cell's result says ``state_lost``.
  State is never lost silently.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio

from sandboxkit._standalone import standalone_source
from sandboxkit.errors import InvalidRequest, SandboxCrashed
from sandboxkit.kernel._models import CellResult, CellStatus
from sandboxkit.models import Limits

__all__ = ["GRACE_S", "KERNEL_SOURCE", "Kernel", "KernelLink", "PipeLink", "describe_shell", "kernel_argv"]

#: The host's deadline for a cell is its timeout plus this (the supervisor enforces the timeout).
GRACE_S = 0.75
#: How long a new kernel may take to say it is ready.
START_TIMEOUT_S = 30.0
#: The in-sandbox program's text, with the shared helpers it imports written in.
KERNEL_SOURCE = standalone_source(Path(__file__).with_name("_kernel_main.py"))


def kernel_argv(
    python: str, limits: Limits, rlimits: Sequence[tuple[int, int]] = (), *, shell: Literal["auto", "python"] = "auto"
) -> list[str]:
    """The command that starts a kernel inside a sandbox (``-I``: nothing from the workspace runs first).

    ``rlimits`` are applied to the worker process that runs cells (never to the supervisor):
    CPU time is left out by the caller, since it would add up over a session's cells.
    ``shell="auto"`` runs cells through IPython where the sandbox's Python has it (else plain
    Python); ``"python"`` always runs plain Python.
    """
    args = {
        "cap": limits.output_bytes,
        "head": limits.output_head_fraction,
        "stop": limits.stop_bytes(),
        "rlimits": [list(r) for r in rlimits],
        "shell": shell,
    }
    return [python, "-I", "-u", "-c", KERNEL_SOURCE, json.dumps(args)]


def describe_shell(python: str | None) -> str:
    """How a kernel started with ``python`` will run cells, in words (for ``doctor``).

    ``"IPython 8.5.0 ..."`` where that interpreter imports IPython (the kernel's default mode),
    else why the kernel falls back to plain Python. Runs the interpreter once, isolated (``-I``).
    """
    if python is None:
        return "none: no python3 on the sandbox PATH"
    try:
        probe = subprocess.run(
            [python, "-I", "-c", "import IPython; print(IPython.__version__)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown: {python} did not run ({exc})"
    if probe.returncode == 0:
        return f"IPython {probe.stdout.strip()} (magics, !cmd, display(), top-level await)"
    return f"plain Python: {python} has no IPython (install python3-ipython; see scripts/toolchains.sh)"


def max_reply_bytes(limits: Limits) -> int:
    """Largest reply a kernel may send: five capped texts (the display bundles count as one), JSON-escaped."""
    return 5 * 6 * (limits.output_bytes + 256) + (1 << 16)


class KernelLink(abc.ABC):
    """One running kernel program as the host sees it: its stdin, its stdout, and a kill switch."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Send bytes to the kernel's stdin. Raises ``ConnectionError`` when it is gone."""

    @abc.abstractmethod
    async def read(self) -> bytes:
        """Some bytes from the kernel's stdout as they arrive; ``b""`` at end of file."""

    @abc.abstractmethod
    def alive(self) -> bool:
        """Cheap check, no I/O wait: False once the kernel program has exited."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the kernel and every process it started. Synchronous, idempotent, quick."""


class PipeLink(KernelLink):
    """A kernel that is a local process with pipes (the subprocess backend; a CLI such as ``docker exec -i``).

    Args:
        proc: the process, started with ``stdin=PIPE, stdout=PIPE``.
        kill: kills the process and everything below it (e.g. its process group or its sandbox's
            PID namespace); called once.
    """

    def __init__(self, proc: subprocess.Popen[bytes], kill: Callable[[], None]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._kill = kill
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._dead = False

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._in, view) :]
                continue
            except BlockingIOError:
                pass
            except (OSError, ValueError) as exc:
                raise ConnectionError("the kernel closed its stdin") from exc
            await _wait(self._in, writable=True)

    async def read(self) -> bytes:
        while True:
            try:
                return os.read(self._out, 1 << 16)
            except BlockingIOError:
                await _wait(self._out, writable=False)
            except (OSError, ValueError):
                return b""

    def alive(self) -> bool:
        return not self._dead and self.proc.poll() is None

    def kill(self) -> None:
        if self._dead:
            return
        self._dead = True
        try:
            self._kill()
        finally:
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            with contextlib.suppress(subprocess.SubprocessError):
                self.proc.wait(5)


async def _wait(fd: int, *, writable: bool) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    (loop.add_writer if writable else loop.add_reader)(fd, ready)
    try:
        await done
    finally:
        (loop.remove_writer if writable else loop.remove_reader)(fd)


class Kernel:
    """A persistent Python interpreter in one sandbox, started on the first cell.

    Owned by its sandbox (see :meth:`Sandbox.open_kernel <sandboxkit.base.Sandbox.open_kernel>`),
    which stops it on ``reset`` and ``close``. One cell runs at a time.

    Args:
        start: starts the kernel program in the sandbox and returns its link.
        limits: the sandbox's limits (timeout default and output caps).
        backend: backend name, for error messages.
        sandbox_id: the sandbox's id, for error messages.
    """

    def __init__(
        self, start: Callable[[], Awaitable[KernelLink]], limits: Limits, *, backend: str, sandbox_id: str
    ) -> None:
        self._start = start
        self.limits = limits
        self.backend = backend
        self.sandbox_id = sandbox_id
        self._link: KernelLink | None = None
        self._buffer = bytearray()
        self._lock = asyncio.Lock()
        #: The current kernel has run a cell (so losing it loses state).
        self._has_state = False
        #: The last kernel was killed and that was reported: the next cell says ``restarted``.
        self._replaced = False
        self.closed = False
        #: How many kernel programs were started (a restart counts).
        self.starts = 0
        #: How the running kernel runs cells, as it said when it started: "ipython" or "python".
        self.shell: str | None = None

    @property
    def running(self) -> bool:
        """Whether a kernel program is running now."""
        return self._link is not None and self._link.alive()

    async def run(self, code: str, *, timeout: float | None = None, fresh: bool = False) -> CellResult:
        """Run one cell in the kernel (started or restarted as needed).

        Args:
            code: Python source; the value of its last expression becomes ``value``.
            timeout: wall-clock limit of the cell (default: the sandbox's ``limits.timeout_s``).
            fresh: run in a new interpreter (earlier cells' variables gone, and not flagged lost).

        Returns:
            The cell's result; a timeout or crash restarts the kernel and says ``state_lost``.

        Raises:
            InvalidRequest: ``code`` is not a string or ``timeout`` is not positive.
            SandboxCrashed: the kernel is closed, or could not be started in the sandbox.
        """
        if not isinstance(code, str):
            raise InvalidRequest(f"code must be a str, got {type(code).__name__}", backend=self.backend)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 24 * 3600
        ):
            raise InvalidRequest(
                f"timeout must be a positive number of seconds (at most a day), got {timeout!r}", backend=self.backend
            )
        try:
            code.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequest(
                f"code is not valid Unicode ({exc.reason} at position {exc.start}); remove lone surrogates",
                backend=self.backend,
                sandbox_id=self.sandbox_id,
            ) from None
        seconds = float(timeout if timeout is not None else self.limits.timeout_s)
        async with self._lock:
            if self.closed:
                raise self._crashed("the kernel is closed")
            return await self._run(code, seconds, fresh)

    def _crashed(self, message: str) -> SandboxCrashed:
        """The error raised when the kernel itself cannot serve a call (closed, not started, or broken)."""
        return SandboxCrashed(message, backend=self.backend, sandbox_id=self.sandbox_id)

    async def _run(self, code: str, seconds: float, fresh: bool) -> CellResult:
        lost = restarted = False
        if self._link is not None and not self._link.alive():
            lost = restarted = self._has_state  # killed between cells: say so
            self._drop()
        if self._link is None:
            restarted = restarted or self._replaced
            self._replaced = False
            await self._launch()
        link = self._link
        assert link is not None
        self._has_state = True
        request = {"op": "cell", "code": code, "timeout": seconds, "fresh": fresh}
        try:
            await link.write(_frame(request))
            reply = await self._receive(link, seconds + GRACE_S)
        except TimeoutError:
            self._drop(replaced=True)
            return CellResult(
                status=CellStatus.TIMEOUT,
                error_name="TimeoutError",
                error_value=f"the cell ran longer than its {seconds:g} s timeout and the kernel did not stop it; "
                "the kernel was killed and restarted",
                restarted=restarted,
                state_lost=True,
                duration_s=seconds + GRACE_S,
            )
        except (ConnectionError, ValueError) as exc:
            self._drop(replaced=True)
            return CellResult(
                status=CellStatus.CRASHED,
                error_name="KernelDied",
                error_value=f"the kernel went away during the cell ({exc}); it will be restarted",
                restarted=restarted,
                state_lost=True,
            )
        except BaseException:  # cancelled: the late reply would be taken for the next cell's
            self._drop(replaced=True)
            raise
        reply["restarted"] = bool(reply.get("restarted")) or restarted
        reply["state_lost"] = bool(reply.get("state_lost")) or lost
        if reply["state_lost"] or reply.get("status") in ("timeout", "crashed"):
            self._has_state = False
        try:
            return CellResult.model_validate(reply)
        except ValueError as exc:
            self._drop(replaced=True)
            raise self._crashed(f"the kernel answered nonsense ({exc}); it was killed") from exc

    async def _launch(self) -> None:
        try:
            link = await self._start()
        except FileNotFoundError as exc:
            raise self._crashed(f"cannot start a Python kernel: {exc}; the sandbox needs python3") from exc
        self.starts += 1
        self._buffer.clear()
        try:
            ready = await self._receive(link, START_TIMEOUT_S)
        except (TimeoutError, ConnectionError, ValueError) as exc:
            link.kill()
            raise self._crashed(
                f"the Python kernel did not start ({exc}); check that python3 runs in the sandbox"
            ) from exc
        except BaseException:
            link.kill()
            raise
        if not ready.get("ready"):
            link.kill()
            raise self._crashed(f"the Python kernel answered {ready!r} instead of ready")
        self._link = link
        self._has_state = False
        self.shell = ready.get("shell") if ready.get("shell") in ("ipython", "python") else "python"

    async def _receive(self, link: KernelLink, timeout_s: float) -> dict[str, Any]:
        """The next frame, within ``timeout_s``. Raises TimeoutError, ConnectionError or ValueError."""
        deadline = time.monotonic() + timeout_s
        limit = max_reply_bytes(self.limits)
        buf = self._buffer
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big")
                if size > limit:
                    raise ValueError(f"a reply of {size} bytes, more than the {limit} its limits allow")
                if len(buf) >= 4 + size:
                    body = bytes(buf[4 : 4 + size])
                    del buf[: 4 + size]
                    msg = json.loads(body)
                    if not isinstance(msg, dict):
                        raise ValueError(f"a reply that is not an object: {body[:80]!r}")
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {timeout_s:g} s")
            try:
                with anyio.fail_after(left):
                    chunk = await link.read()
            except TimeoutError:
                raise TimeoutError(f"no answer within {timeout_s:g} s") from None
            if not chunk:
                raise ConnectionError("the kernel exited")
            buf += chunk

    def _drop(self, *, replaced: bool = False) -> None:
        link, self._link = self._link, None
        self._buffer.clear()
        self._has_state = False
        self._replaced = self._replaced or replaced
        if link is not None:
            link.kill()

    def kill(self) -> None:
        """Kill the kernel now (synchronous; the sandbox's reset and teardown call it)."""
        self._drop(replaced=True)

    def discard(self) -> None:
        """Kill the kernel now and refuse further cells (a sandbox's reset and teardown: its tenant is gone)."""
        self.kill()
        self.closed = True

    async def close(self) -> None:
        """Kill the kernel and refuse further cells. Idempotent."""
        self.closed = True
        self._drop()


def _frame(msg: dict[str, Any]) -> bytes:
    body = json.dumps(msg).encode()
    return len(body).to_bytes(4, "big") + body


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants on this host, read from ``/proc/PID/task/PID/children``.

    A handful of small reads (a kernel is bwrap's init, a supervisor and a worker), so tearing a
    kernel down can kill and wait for every process it left, not just the one the host started.
    """
    found, todo = [root], [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
        found += kids
        todo += kids
    return found
