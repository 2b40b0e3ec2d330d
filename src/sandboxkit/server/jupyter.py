"""``POST /run_jupyter``: Sandbox Fusion's notebook endpoint on sandboxkit kernels, plus kept sessions.

Compatible with Sandbox Fusion's request and response fields (``cells``, ``cell_timeout``,
``total_timeout``, ``kernel``, ``files``, ``fetch_files``; ``status``, ``message``, ``driver``,
``cells`` of ``stdout`` / ``stderr`` / ``display`` / ``error``, ``files``), and with its rules:
the cells of one request share one interpreter; ``status`` is ``Success`` when every cell ran
(a cell that raised is an ``error`` item, not a failure); a request that runs past
``total_timeout`` is ``Failed`` with ``driver.status = "TimeLimitExceeded"`` and no cells.
A value is a ``display`` item ``{"text/plain": repr}``; an error item is ``{"ename", "evalue",
"traceback": [lines]}``. Where Sandbox Fusion starts a Jupyter server per request, sandboxkit runs
the cells in its own kernel (see ``docs/kernels.md``), so no Jupyter is needed in the sandbox.

The extension: a request with ``session_id`` keeps its kernel (and its sandbox's files) for the
next request with the same id, so state survives across tool calls. A kept session is closed
after ``kernel_ttl_s`` idle seconds; at most ``max_kernels`` live at once, and a request that
would open one more is refused with **503** and ``Retry-After`` (a client library retries; a
person reads the message). ``DELETE /run_jupyter/{session_id}`` closes one at once.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from pydantic import BaseModel, Field

from sandboxkit.errors import InvalidRequest
from sandboxkit.kernel import CellResult, CellStatus
from sandboxkit.models import check_relative_path
from sandboxkit.pool import SandboxPool
from sandboxkit.protocols.sandbox_fusion import CommandRunResult, CommandRunStatus, RunStatus
from sandboxkit.session import Session

__all__ = ["CellRunResult", "KernelSessions", "RunJupyterRequest", "RunJupyterResponse", "SessionsFull"]

log = logging.getLogger(__name__)


class RunJupyterRequest(BaseModel):
    """Sandbox Fusion's ``RunJupyterRequest``, plus ``session_id``."""

    cells: list[str] = Field(..., description="Code cells, run in order in one Python interpreter.")
    cell_timeout: float = Field(0, ge=0, description="Seconds per cell (0: only total_timeout applies).")
    total_timeout: float = Field(45, gt=0, description="Seconds for all the cells of this request.")
    kernel: Literal["python3"] = "python3"
    files: dict[str, str | None] = Field(default_factory=dict, description="Path -> base64 content, written first.")
    fetch_files: list[str] = Field(default_factory=list, description="Paths read back after the cells (base64).")
    memory_limit_MB: int = Field(-1, description="Accepted for compatibility; the server's limits apply.")
    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="sandboxkit extension: keep the kernel and files for later requests with the same id.",
    )


class CellRunResult(BaseModel):
    """One cell's output, as Sandbox Fusion reports it (plus sandboxkit's restart flags)."""

    stdout: str
    stderr: str
    display: list[dict[str, Any]] = Field(default_factory=list)
    error: list[dict[str, Any]] = Field(default_factory=list)
    restarted: bool = Field(False, description="sandboxkit: the cell ran in a new interpreter.")
    state_lost: bool = Field(False, description="sandboxkit: earlier cells' variables are gone.")


class RunJupyterResponse(BaseModel):
    """Sandbox Fusion's ``RunJupyterResponse`` (``session_id`` echoed when one was given)."""

    status: RunStatus
    message: str = ""
    driver: CommandRunResult | None = None
    cells: list[CellRunResult] = Field(default_factory=list)
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    session_id: str | None = None


class SessionsFull(Exception):
    """``max_kernels`` kept sessions are live; the request should be retried later (HTTP 503)."""


def cell_to_sandbox_fusion(result: CellResult) -> CellRunResult:
    """A :class:`CellResult` as a Sandbox Fusion cell."""
    display = [{"text/plain": result.value}] if result.value is not None else []
    error: list[dict[str, Any]] = []
    if result.status is not CellStatus.OK:
        trace = result.traceback or f"{result.error_name}: {result.error_value}"
        error.append({"ename": result.error_name, "evalue": result.error_value, "traceback": trace.splitlines()})
    return CellRunResult(
        stdout=result.stdout,
        stderr=result.stderr,
        display=display,
        error=error,
        restarted=result.restarted,
        state_lost=result.state_lost,
    )


@dataclass
class _Kept:
    session: Session
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class KernelSessions:
    """The kept sessions of ``/run_jupyter``: opened on first use, closed when idle or at shutdown.

    Args:
        pool: the server's pool (a kept session holds one of its sandboxes).
        ttl_s: idle seconds after which a kept session is closed.
        max_kernels: kept sessions alive at once.
        max_total_s: ceiling on a request's ``total_timeout`` (lowered to it).
    """

    def __init__(
        self, pool: SandboxPool, *, ttl_s: float = 600.0, max_kernels: int = 64, max_total_s: float = 300.0
    ) -> None:
        if ttl_s <= 0 or max_kernels < 1:
            raise InvalidRequest(f"kernel_ttl_s must be > 0 and max_kernels >= 1, got {ttl_s!r}, {max_kernels!r}")
        self.pool = pool
        self.ttl_s = ttl_s
        self.max_kernels = max_kernels
        self.max_total_s = max_total_s
        self._kept: dict[str, _Kept] = {}
        self._lock = anyio.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    async def run(self, body: RunJupyterRequest, pod_name: str | None = None) -> RunJupyterResponse:
        """Run the request's cells (in its kept session, or in a session of its own).

        Raises:
            SessionsFull: it names a new session and ``max_kernels`` are live.
            InvalidRequest: a file path or a file's base64 is bad.
            SandboxError: the infrastructure failed (the caller answers ``SandboxError``).
        """
        if body.total_timeout > self.max_total_s:
            body = body.model_copy(update={"total_timeout": self.max_total_s})
        files = _decode_files(body.files)
        fetch = [_checked("fetch_files", p) for p in body.fetch_files]
        await self.expire()
        if body.session_id is None:
            async with self.pool.session() as session:
                return await _run_cells(session, body, files, fetch, pod_name)
        kept = await self._acquire(body.session_id)
        try:
            return await _run_cells(kept.session, body, files, fetch, pod_name)
        finally:
            kept.busy -= 1
            kept.last_used = time.monotonic()

    async def _acquire(self, session_id: str) -> _Kept:
        async with self._lock:
            kept = self._kept.get(session_id)
            if kept is None or kept.session.closed:
                if len(self._kept) >= self.max_kernels:
                    raise SessionsFull(
                        f"{len(self._kept)} kept sessions are live, the server's max_kernels; retry later, "
                        "close one with DELETE /run_jupyter/{session_id}, or send no session_id"
                    )
                kept = self._kept[session_id] = _Kept(self.pool.session())
            kept.busy += 1
            return kept

    async def close(self, session_id: str) -> bool:
        """Close a kept session now; False if there is none by that id."""
        async with self._lock:
            kept = self._kept.pop(session_id, None)
        if kept is None:
            return False
        await kept.session.close()
        return True

    async def expire(self) -> int:
        """Close kept sessions idle for longer than ``ttl_s``; returns how many."""
        now = time.monotonic()
        async with self._lock:
            stale = [k for k, v in self._kept.items() if not v.busy and now - v.last_used > self.ttl_s]
            closing = [self._kept.pop(k) for k in stale]
        for kept in closing:
            await kept.session.close()
        return len(closing)

    async def reaper(self, every_s: float | None = None) -> None:
        """Run :meth:`expire` forever (started by the app's lifespan, cancelled at shutdown)."""
        while True:
            await anyio.sleep(every_s or max(1.0, min(self.ttl_s / 4, 60.0)))
            try:
                await self.expire()
            except Exception:  # keep reaping; a failed close is the pool's to log
                log.exception("closing idle /run_jupyter sessions failed")

    async def aclose(self) -> None:
        """Close every kept session (server shutdown)."""
        async with self._lock:
            closing, self._kept = list(self._kept.values()), {}
        with anyio.CancelScope(shield=True):
            for kept in closing:
                await kept.session.close()


async def _run_cells(
    session: Session,
    body: RunJupyterRequest,
    files: dict[str, bytes],
    fetch: list[str],
    pod_name: str | None,
) -> RunJupyterResponse:
    started = time.monotonic()
    deadline = started + body.total_timeout
    if files:
        await session.write_files(files)
    cells: list[CellRunResult] = []
    for code in body.cells:
        left = deadline - time.monotonic()
        timeout = min(left, body.cell_timeout) if body.cell_timeout > 0 else left
        if timeout <= 0:
            return _time_limit(body, started, pod_name)
        result = await session.python(code, timeout=timeout)
        if result.status is CellStatus.TIMEOUT and (body.cell_timeout <= 0 or timeout < body.cell_timeout):
            return _time_limit(body, started, pod_name)  # the request's total ran out: Sandbox Fusion's TLE
        cells.append(cell_to_sandbox_fusion(result))
    fetched = await session.read_files(fetch) if fetch else {}
    elapsed = time.monotonic() - started
    return RunJupyterResponse(
        status=RunStatus.Success,
        driver=CommandRunResult(
            status=CommandRunStatus.Finished, execution_time=elapsed, return_code=0, stdout="", stderr=""
        ),
        cells=cells,
        executor_pod_name=pod_name,
        files={path: base64.b64encode(data).decode() for path, data in fetched.items()},
        session_id=body.session_id,
    )


def _time_limit(body: RunJupyterRequest, started: float, pod_name: str | None) -> RunJupyterResponse:
    return RunJupyterResponse(
        status=RunStatus.Failed,
        message=f"the cells ran longer than total_timeout={body.total_timeout:g}s",
        driver=CommandRunResult(status=CommandRunStatus.TimeLimitExceeded, execution_time=time.monotonic() - started),
        executor_pod_name=pod_name,
        session_id=body.session_id,
    )


def _checked(field_name: str, path: str) -> str:
    try:
        return check_relative_path(path)
    except ValueError as exc:
        raise InvalidRequest(f"{field_name}: {exc}") from exc


def _decode_files(files: dict[str, str | None]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path, content in files.items():
        checked = _checked("files", path)
        try:
            out[checked] = base64.b64decode(content or "", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequest(
                f"files: {path!r} is not valid base64 ({exc}); encode file contents with base64"
            ) from exc
    return out
