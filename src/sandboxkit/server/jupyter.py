"""``POST /run_jupyter``: Sandbox Fusion's notebook endpoint on sandboxkit kernels, plus kept sessions.

Compatible with Sandbox Fusion's request and response fields (``cells``, ``cell_timeout``,
``total_timeout``, ``kernel``, ``files``, ``fetch_files``; ``status``, ``message``, ``driver``,
``cells`` of ``stdout`` / ``stderr`` / ``display`` / ``error``, ``files``), and with its rules:
the cells of one request share one interpreter; ``status`` is ``Success`` when every cell ran
(a cell that raised is an ``error`` item, not a failure); a request that runs past
``total_timeout`` is ``Failed`` with ``driver.status = "TimeLimitExceeded"`` and no cells.
``display`` lists the cell's MIME bundles in order, as ipykernel's ``display_data`` and
``execute_result`` messages carry them (``display()`` calls, then the value: ``{"text/plain":
...}``, plus ``text/html``, base64 ``image/png`` ...); an error item is ``{"ename", "evalue",
"traceback": [lines]}``. Where Sandbox Fusion starts a Jupyter server per request, sandboxkit runs
the cells in its own kernel (see ``docs/kernels.md``), through IPython's ``InteractiveShell`` where
the sandbox's Python has IPython, so no Jupyter server is needed in the sandbox.

The extension: kept sessions, whose kernel and files survive from one request to the next.

* **The server issues the ids.** ``POST /run_jupyter/sessions`` returns a ``session_id`` of 128
  random bits plus a MAC under a key that lives only in this server process. The id is the
  credential (whoever holds it may use and close the session), so a client cannot name, guess or
  reach another client's session; an id this server never issued is refused with **404**. A
  request without ``session_id`` (every Sandbox Fusion client) gets a one-shot kernel as before.
* **No silent loss.** An id this server issued whose session expired (``ttl_s`` idle seconds) or
  was closed (``DELETE /run_jupyter/sessions/{id}``) is recognised by its MAC: the request runs in
  a new kernel, and the answer says so once (``state_lost`` on the response and on its first cell,
  and a ``message``), so an agent learns that its variables and files are gone.
* **A cap of their own.** Kept sessions take sandboxes from a pool of their own
  (``max_sessions``), never from the pool that serves ``/run_code`` and one-shot notebooks, so
  idle sessions cannot starve other clients. One session too many is refused with **429** and a
  ``Retry-After`` of the seconds until the least recently used idle session expires; a live
  session is never taken from its holder to make room.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
from pydantic import BaseModel, Field

from sandboxkit.errors import InvalidRequest
from sandboxkit.kernel import CellResult, CellStatus
from sandboxkit.models import check_relative_path
from sandboxkit.pool import SandboxPool
from sandboxkit.protocols.sandbox_fusion import CommandRunResult, CommandRunStatus, RunStatus
from sandboxkit.session import Session

__all__ = [
    "CellRunResult",
    "KernelSessions",
    "RunJupyterRequest",
    "RunJupyterResponse",
    "SessionIds",
    "SessionsFull",
    "UnknownSession",
]

log = logging.getLogger(__name__)

#: Why-lost notes remembered for this many ids (older ones get a generic note; they still revive).
_GONE_NOTES = 4096


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
        description="sandboxkit extension: an id from POST /run_jupyter/sessions, to run in that kept session.",
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
    state_lost: bool = Field(
        False, description="sandboxkit: the kept session had expired or was closed; this request ran in a new one."
    )


class Seats(Protocol):
    """Seats of kept sessions shared with other processes (the ``--workers`` broker's link)."""

    async def take_seat(self) -> bool:
        """One more kept session, if the shared ``max_sessions`` allows it."""
        ...

    def give_seat(self) -> None:
        """A kept session closed."""
        ...


class SessionsFull(Exception):
    """``max_sessions`` kept sessions are live (HTTP 429 with ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UnknownSession(Exception):
    """The ``session_id`` was not issued by this server process (HTTP 404)."""


class SessionIds:
    """Issues unguessable session ids and recognises its own, without remembering them.

    An id is ``NONCE.MAC``: 18 random bytes and a truncated HMAC-SHA256 of the nonce under a key
    made at start. Recognising an id by its MAC (not by a table) is what lets an expired or closed
    session be told apart from an id nobody issued, for as long as the process lives, in constant
    memory. The key is never written anywhere, so ids die with the server (a restarted server
    refuses them: it cannot tell them from forgeries).

    With ``--workers N`` every worker holds the same key (the supervisor's) and writes its own
    number into the nonce, ``w<index>~<random>``, so the MAC also vouches for which worker holds
    the session (:meth:`owner`): a request can be sent to that worker, and a replacement worker
    recognises the ids of the worker it replaced as lost sessions, not forgeries.

    Args:
        key: the MAC key (default: a new random one, this object's alone).
        worker: this process's worker number, written into the ids it issues (None: one process).
    """

    def __init__(self, key: bytes | None = None, worker: int | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self._prefix = "" if worker is None else f"w{worker}~"

    def issue(self) -> str:
        """A new id."""
        nonce = self._prefix + secrets.token_urlsafe(18)
        return f"{nonce}.{self._mac(nonce)}"

    def owner(self, session_id: str) -> int | None:
        """The worker that issued ``session_id``, if it is an issued id that names one."""
        if not self.issued(session_id):
            return None
        head, tilde, _ = session_id.partition("~")
        if not tilde or not head.startswith("w") or not head[1:].isdigit():
            return None
        return int(head[1:])

    def issued(self, session_id: str) -> bool:
        """Whether this object issued ``session_id`` (compared in constant time)."""
        nonce, dot, mac = session_id.partition(".")
        return bool(dot) and hmac.compare_digest(mac.encode(), self._mac(nonce).encode())

    def _mac(self, nonce: str) -> str:
        digest = hmac.new(self._key, nonce.encode(), hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def cell_to_sandbox_fusion(result: CellResult) -> CellRunResult:
    """A :class:`CellResult` as a Sandbox Fusion cell (its bundles are already in Jupyter's shape)."""
    display = [dict(bundle) for bundle in result.display]
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
class Kept:
    """A kept session and its bookkeeping.

    ``lost`` says why an earlier session under the same id is gone; it is reported on the next
    answer (then cleared), so the loss is told exactly once and never silently.
    """

    session_id: str
    session: Session
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    lost: str | None = None


class KernelSessions:
    """The sessions of ``/run_jupyter``: one-shot ones from the server's pool, kept ones from their own.

    Args:
        pool: the server's pool (one-shot notebooks; kept sessions use its backend and limits only).
        ttl_s: idle seconds after which a kept session is closed.
        max_sessions: kept sessions alive at once (their own pool's sandbox cap).
        max_total_s: ceiling on a request's ``total_timeout`` (lowered to it).
        ids: issues and checks session ids (default: ids of this process alone).
        seats: where ``max_sessions`` is counted when other processes share it (``--workers``;
            default: this object alone).

    Raises:
        InvalidRequest: ``ttl_s`` is not positive or ``max_sessions`` is below 1.
    """

    def __init__(
        self,
        pool: SandboxPool,
        *,
        ttl_s: float = 600.0,
        max_sessions: int = 64,
        max_total_s: float = 300.0,
        ids: SessionIds | None = None,
        seats: Seats | None = None,
    ) -> None:
        if not ttl_s > 0 or max_sessions < 1:
            raise InvalidRequest(f"kernel_ttl_s must be > 0 and max_sessions >= 1, got {ttl_s!r}, {max_sessions!r}")
        self.pool = pool
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_total_s = max_total_s
        self.ids = ids or SessionIds()
        self._seats = seats
        # Its own cap: an idle kept session holds a sandbox of this pool, never one /run_code needs.
        self._kept_pool = SandboxPool(
            pool.backend,
            max_concurrency=max_sessions,
            max_sandboxes=max_sessions,
            limits=pool.limits,
            handle_signals=False,
        )
        self._kept: dict[str, Kept] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._lock = anyio.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    async def open(self) -> str:
        """Reserve a kept session (its sandbox opens on first use); returns its new id.

        Raises:
            SessionsFull: ``max_sessions`` are live.
        """
        await self.expire()
        async with self._lock:
            await self._take_room()
            session_id = self.ids.issue()
            self._kept[session_id] = Kept(session_id, self._kept_pool.session())
        return session_id

    @asynccontextmanager
    async def claim(self, session_id: str | None) -> AsyncIterator[Kept | None]:
        """Hold the kept session ``session_id`` for one request (``None``: a one-shot request).

        An issued id whose session is gone gets a new session marked ``lost``.

        Raises:
            UnknownSession: this server never issued ``session_id``.
            SessionsFull: the session must be made anew and ``max_sessions`` are live.
        """
        if session_id is None:
            yield None
            return
        self._check_issued(session_id)
        kept = self._hold(session_id)
        if kept is None:
            # Only a session made anew may have to wait for stale ones to close (to make room);
            # a live one is used at once, so its request never waits on other sessions' teardown.
            await self.expire()
            async with self._lock:
                kept = self._hold(session_id)
                if kept is None:
                    if self._kept.pop(session_id, None) is not None:  # its sandbox died: its seat goes too
                        self._give_room()
                    await self._take_room()
                    why = self._gone.pop(session_id, "was closed or expired")
                    kept = self._kept[session_id] = Kept(session_id, self._kept_pool.session(), lost=why)
                    kept.busy += 1
        try:
            yield kept
        finally:
            kept.busy -= 1
            kept.last_used = time.monotonic()

    async def run(self, body: RunJupyterRequest, kept: Kept | None, pod_name: str | None = None) -> RunJupyterResponse:
        """Run the request's cells in ``kept`` (from :meth:`claim`), or in a one-shot session.

        Raises:
            InvalidRequest: a file path or a file's base64 is bad.
            SandboxError: the infrastructure failed (the caller answers ``SandboxError``).
        """
        if body.total_timeout > self.max_total_s:
            body = body.model_copy(update={"total_timeout": self.max_total_s})
        files = _decode_files(body.files)
        fetch = [_checked("fetch_files", p) for p in body.fetch_files]
        if kept is None:
            async with self.pool.session() as session:
                return await _run_cells(session, body, files, fetch, pod_name)
        response = await _run_cells(kept.session, body, files, fetch, pod_name)
        if kept.lost is not None:
            _tell_lost(response, kept.session_id, kept.lost)
            kept.lost = None
        return response

    async def close(self, session_id: str) -> bool:
        """Close a kept session now; False if it is already gone (closed or expired).

        Raises:
            UnknownSession: this server never issued ``session_id``.
        """
        self._check_issued(session_id)
        async with self._lock:
            kept = self._kept.pop(session_id, None)
            if kept is not None:
                self._note_gone(session_id, "was closed (DELETE)")
                self._give_room()
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
            for session_id in stale:
                self._note_gone(session_id, f"expired after {self.ttl_s:g}s idle")
                self._give_room()
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

    def statistics(self) -> dict[str, Any]:
        """Kept sessions live, busy and the bounds (for ``/v1/stats``)."""
        busy = sum(1 for kept in self._kept.values() if kept.busy)
        return {"live": len(self._kept), "busy": busy, "max_sessions": self.max_sessions, "ttl_s": self.ttl_s}

    async def aclose(self) -> None:
        """Close every kept session and their pool (server shutdown)."""
        async with self._lock:
            closing, self._kept = list(self._kept.values()), {}
            for _ in closing:
                self._give_room()
        with anyio.CancelScope(shield=True):
            for kept in closing:
                await kept.session.close()
            await self._kept_pool.aclose()

    def _hold(self, session_id: str) -> Kept | None:
        """The live session under ``session_id``, marked busy (so it cannot expire), or None."""
        kept = self._kept.get(session_id)
        if kept is None or kept.session.closed:
            return None
        kept.busy += 1
        return kept

    def _check_issued(self, session_id: str) -> None:
        if not self.ids.issued(session_id):
            raise UnknownSession(
                f"session_id {session_id[:80]!r} was not issued by this server (or the server restarted since); "
                "open a kept session with POST /run_jupyter/sessions and send the id it returns, or send no "
                "session_id for a one-shot kernel"
            )

    async def _take_room(self) -> None:
        """Raise :class:`SessionsFull` unless one more kept session fits; take its seat (call with the lock held)."""
        if len(self._kept) < self.max_sessions:
            try:
                if self._seats is None or await self._seats.take_seat():
                    return
            except ConnectionError:  # the broker is gone: the server is stopping
                pass
        now = time.monotonic()
        idle = [self.ttl_s - (now - kept.last_used) for kept in self._kept.values() if not kept.busy]
        retry = max(1, math.ceil(min(idle) if idle else self.ttl_s))
        live = (
            "the server's max_sessions kept sessions are live"
            if self._seats
            else (f"{len(self._kept)} kept sessions are live, the server's max_sessions")
        )
        raise SessionsFull(
            f"{live}; retry in {retry}s, close one with DELETE /run_jupyter/sessions/{{session_id}}, "
            "or send no session_id for a one-shot kernel",
            retry,
        )

    def _give_room(self) -> None:
        """A kept session is gone: give its seat back."""
        if self._seats is not None:
            self._seats.give_seat()

    def _note_gone(self, session_id: str, why: str) -> None:
        self._gone[session_id] = why
        while len(self._gone) > _GONE_NOTES:
            self._gone.popitem(last=False)


def _tell_lost(response: RunJupyterResponse, session_id: str, why: str) -> None:
    """Mark an answer as the first one since the session under ``session_id`` was lost."""
    response.state_lost = True
    if response.cells:
        response.cells[0].state_lost = response.cells[0].restarted = True
    note = f"session {session_id[:12]}... {why}: its variables and files are gone, these cells ran in a new kernel"
    response.message = "; ".join([note, *([response.message] if response.message else [])])


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
        result = await session.python(code, timeout_s=timeout)
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
