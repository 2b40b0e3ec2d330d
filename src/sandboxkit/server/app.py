"""The Sandbox Fusion-compatible HTTP app: ``POST /run_code``, ``POST /run_jupyter`` and ``GET /v1/ping``.

Behaviour that clients depend on, kept from Sandbox Fusion: field names and status strings
(see :mod:`sandboxkit.protocols.sandbox_fusion`), HTTP 200 for ``Success``, ``Failed`` *and*
``SandboxError``, HTTP 422 with FastAPI's ``{"detail": [...]}`` body for invalid input
(malformed JSON, unknown language), ``"pong"`` on ``/v1/ping``, OpenAPI at ``/docs``.

What sandboxkit adds:

* **backpressure that never loses a reward** (issue 18): Sandbox Fusion never refuses, it is slow,
  and verl scores a request that got no answer as wrong. So a request waits for a run slot as long
  as its client waits, and the client's read timer is kept from firing: once a request has had no
  answer for ``heartbeat_s`` seconds, the server starts a 200 response and sends one space every
  ``heartbeat_s`` seconds until the JSON result follows (JSON allows leading whitespace; verl's
  ``requests``, the ``sandbox-fusion`` client's ``requests``/``aiohttp`` and httpx all parse it).
  A run that answers within ``heartbeat_s`` (nearly all) gets a plain response. The queue is
  bounded by memory (:mod:`.admission`: requests and body bytes); a refusal is **504** with
  ``Retry-After``, which every known client retries;
* ceilings on what a request may ask for (:mod:`.ceilings`), a body size cap (**413**) and a body
  deadline (**408**) enforced while the body is read, before it is parsed;
* ``..`` and absolute paths in ``files`` / ``fetch_files`` rejected with 422;
* output is never cut silently: results carry ``stdout_truncated`` / ``stderr_truncated`` (head
  and tail kept) and a ``message``;
* ``GET /metrics`` (Prometheus text format), ``GET /v1/stats`` (the same counters as JSON);
* ``/run_jupyter`` on sandboxkit's kernels, and kept sessions under server-issued ids
  (``POST /run_jupyter/sessions``) with a sandbox cap of their own (:mod:`.jupyter`);
* an optional bearer token on every endpoint but ``/v1/ping`` (:mod:`.auth`);
* Sandbox Fusion's other endpoints (datasets, ``/submit``...) answer **404**
  with a body that says sandboxkit does not provide them (:mod:`.not_provided`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from sandboxkit.base import Backend
from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.languages import LANGUAGES, resolve_language
from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool
from sandboxkit.protocols.sandbox_fusion import (
    FieldError,
    RunCodeRequest,
    RunCodeResponse,
    RunStatus,
    request_from_sandbox_fusion,
    result_to_sandbox_fusion,
)
from sandboxkit.server.admission import Admission, AdmissionMiddleware
from sandboxkit.server.auth import BearerTokenMiddleware, check_token
from sandboxkit.server.ceilings import Ceilings
from sandboxkit.server.gate import Gate, QueueTimeout
from sandboxkit.server.jupyter import (
    KernelSessions,
    RunJupyterRequest,
    RunJupyterResponse,
    SessionsFull,
    UnknownSession,
)
from sandboxkit.server.metrics import ServerMetrics
from sandboxkit.server.not_provided import add_not_provided_routes

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_QUEUE", "DEFAULT_MAX_QUEUE_BYTES", "create_app"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_QUEUE = 4096
DEFAULT_MAX_QUEUE_BYTES = 256 * 1024 * 1024
_JSON = "application/json"


@dataclass
class _Answer:
    """What a run produced, before it is written as a response: a status, a JSON body, headers."""

    status: int
    body: bytes
    headers: dict[str, str] | None = None


def create_app(
    pool_or_backend: SandboxPool | Backend | str = "subprocess",
    max_concurrency: int = 64,
    queue_timeout: float | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    *,
    max_queue: int | None = None,
    max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
    body_timeout_s: float = 60.0,
    heartbeat_s: float | None = 5.0,
    limits: Limits | None = None,
    ceilings: Ceilings | None = None,
    backend_options: Mapping[str, Any] | None = None,
    run_grace_s: float = 30.0,
    kernel_ttl_s: float = 600.0,
    max_sessions: int = 64,
    token: str | None = None,
) -> FastAPI:
    """Build the app.

    Args:
        pool_or_backend: a :class:`SandboxPool` (used as is, not closed by the app), or a
            backend (instance or registered name) for which the app opens and closes a pool.
        max_concurrency: runs in flight at once (and the pool's cap when the app makes it).
        queue_timeout: seconds a request may wait for a slot; default None: as long as its
            client waits (the heartbeat keeps it waiting). Past it: 504, or a ``SandboxError``
            body once the heartbeat has started the response.
        max_body_bytes: largest request body; larger ones get 413.
        max_queue: requests that may wait for a slot at once (default 4096); more get 504.
        max_queue_bytes: body bytes that requests inside the server may hold at once; more get 504.
        body_timeout_s: seconds a client has to send its body; slower ones get 408.
        heartbeat_s: after this many seconds without an answer, start the 200 response and send
            a space this often until the result (None or 0: never; the client may then time out).
        limits: default limits of a run (memory, pids, output cap...); the request's timeouts and
            a positive ``memory_limit_MB`` override them, up to ``ceilings``.
        ceilings: the most a request may ask for (default :class:`Ceilings`).
        backend_options: options for the backend when it is given by name.
        run_grace_s: a run that has not returned ``compile_timeout + run_timeout + run_grace_s``
            seconds after it started is abandoned and answered as ``SandboxError``.
        kernel_ttl_s: kept ``/run_jupyter`` sessions close after this many idle seconds.
        max_sessions: kept ``/run_jupyter`` sessions alive at once, in a sandbox pool of their own
            (so the server may hold ``max_concurrency + max_sessions`` sandboxes); past it, 429.
        token: when set, every endpoint but ``/v1/ping`` requires ``Authorization: Bearer <token>``.

    Raises:
        BackendNotFound / BackendUnavailable: the backend cannot be built.
        InvalidRequest: a bound is out of range.
    """
    ceilings = ceilings or Ceilings()
    queue = DEFAULT_MAX_QUEUE if max_queue is None else max_queue
    try:  # checked before a pool (and its backend) exists, so a bad bound leaks nothing
        if queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue!r}")
        if heartbeat_s is not None and heartbeat_s < 0:
            raise ValueError(f"heartbeat_s must be >= 0, got {heartbeat_s!r}")
        if not kernel_ttl_s > 0 or max_sessions < 1:
            raise ValueError(f"kernel_ttl_s must be > 0 and max_sessions >= 1, got {kernel_ttl_s!r}, {max_sessions!r}")
        if token is not None:
            check_token(token)
        gate = Gate(max_concurrency, queue_timeout)
        admission = Admission(max_concurrency + queue, max_queue_bytes, max_body_bytes, body_timeout_s)
        if limits is not None and limits.memory_mb is not None and limits.memory_mb > ceilings.memory_mb:
            raise ValueError(
                f"the default memory limit {limits.memory_mb} MB is above the ceiling {ceilings.memory_mb}"
            )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    if isinstance(pool_or_backend, SandboxPool):
        pool, owns_pool = pool_or_backend, False
    else:
        pool = SandboxPool(
            pool_or_backend,
            max_concurrency=max_concurrency,
            limits=limits,
            backend_options=backend_options,
            handle_signals=False,  # uvicorn owns the signals
        )
        owns_pool = True
    default_limits = limits or pool.limits
    supported = pool.backend.capabilities.languages
    languages = _sandbox_fusion_languages(supported)
    pod_name = os.environ.get("MY_POD_NAME")
    metrics = ServerMetrics(pool, gate, admission)
    beat = heartbeat_s or None
    kernels = KernelSessions(pool, ttl_s=kernel_ttl_s, max_sessions=max_sessions, max_total_s=ceilings.run_timeout_s)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        log.info("serving backend %s, max_concurrency=%d, languages=%s", pool.backend.name, max_concurrency, languages)
        reaper = asyncio.ensure_future(kernels.reaper())
        try:
            yield
        finally:
            reaper.cancel()
            with suppress(asyncio.CancelledError):
                await reaper
            await kernels.aclose()
            if owns_pool:
                await pool.aclose()

    app = FastAPI(
        title="sandboxkit (Sandbox Fusion-compatible API)",
        description=(
            f"Runs code on the **{pool.backend.name}** backend. Languages (Sandbox Fusion names): "
            f"{', '.join(languages)}. At most {max_concurrency} runs in flight; up to {queue} more requests "
            "wait for a slot (longer waits keep the connection alive with whitespace before the JSON)."
        ),
        lifespan=lifespan,
    )
    app.add_middleware(AdmissionMiddleware, admission=admission)
    if token is not None:  # added last, so it runs first: a stranger's body costs no admission budget
        app.add_middleware(BearerTokenMiddleware, token=token)
    app.state.pool = pool
    app.state.gate = gate
    app.state.admission = admission
    app.state.metrics = metrics
    app.state.kernels = kernels

    @app.get("/", include_in_schema=False)
    async def index() -> RedirectResponse:
        return RedirectResponse("./docs")

    @app.get("/v1/ping", response_model=str)
    async def ping() -> str:
        """Health check: always ``"pong"`` while the server is up."""
        return "pong"

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        """Admission counters and the pool's metrics."""
        return {
            "gate": vars(gate.statistics()),
            "admission": vars(admission.statistics()),
            "responses": metrics.response_counts(),
            "pool": pool.metrics(),
            "sessions": kernels.statistics(),
        }

    @app.get("/metrics", include_in_schema=True)
    async def prometheus_metrics() -> Response:
        """The pool's and the server's metrics in Prometheus text format."""
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    async def execute(body: RunCodeRequest) -> _Answer:
        if not _runs(supported, body.language):
            msg = (
                f"language {body.language!r} is not available; this server ({pool.backend.name} backend) "
                f"runs: {', '.join(languages)}"
            )
            return _unprocessable("language", msg, body.language)
        try:
            capped, notes = ceilings.apply(body)
            request = request_from_sandbox_fusion(capped, default_limits)
        except FieldError as exc:
            return _unprocessable(exc.field, exc.message, None)
        try:
            async with gate.slot():
                deadline = request.limits.compile_timeout_s + request.limits.timeout_s + run_grace_s
                result = await pool.run(request, deadline_s=deadline)
        except QueueTimeout:
            return _saturated(
                f"server busy: no run slot freed up within {gate.queue_timeout:g}s "
                f"({gate.max_concurrency} runs in flight); retry later"
            )
        except InvalidRequest as exc:
            return _unprocessable("body", str(exc), None)
        except SandboxError as exc:
            log.warning("run failed on the infrastructure side: %s", exc)
            return _sandbox_error(f"{exc.kind}: {exc}", pod_name)
        except Exception as exc:  # a backend bug: report it as an infra error, keep serving
            log.exception("backend %s raised unexpectedly", pool.backend.name)
            return _sandbox_error(f"internal error: {type(exc).__name__}: {exc}", pod_name)
        response = result_to_sandbox_fusion(result, executor_pod_name=pod_name)
        if notes:
            response.message = "; ".join([*notes, *([response.message] if response.message else [])])
        return _Answer(200, response.model_dump_json().encode())

    @app.post(
        "/run_code",
        response_model=RunCodeResponse,
        responses={
            408: {"description": "the request body did not arrive within the server's body timeout"},
            413: {"description": "request body larger than the server's limit"},
            504: {"description": "the server holds as many requests (or body bytes) as it may; retry"},
        },
    )
    async def run_code(body: RunCodeRequest) -> Response:
        """Run code once: compile if needed, run with stdin, fetch files.

        HTTP 200 for ``Success``, ``Failed`` and ``SandboxError``; 422 for invalid input; 504
        when the server is full. A long wait is answered 200 with whitespace before the JSON.
        """
        return await respond(execute(body))

    async def respond(work: Awaitable[_Answer]) -> Response:
        """The answer, or (past ``heartbeat_s``) a 200 that sends whitespace until the answer."""
        task = asyncio.ensure_future(work)
        try:
            if beat is not None:
                await asyncio.wait({task}, timeout=beat)
            else:
                await asyncio.wait({task})
        except BaseException:
            task.cancel()
            raise
        if task.done():
            answer = task.result()
            metrics.answered(answer.status, answer.body, streamed=False)
            return Response(answer.body, status_code=answer.status, media_type=_JSON, headers=answer.headers)
        assert beat is not None
        return StreamingResponse(_heartbeats(task, beat, metrics, pod_name), media_type=_JSON)

    def no_kernels() -> _Answer | None:
        if pool.backend.capabilities.kernels:
            return None
        detail = (
            f"the {pool.backend.name} backend has no Python kernels; serve with "
            "--backend subprocess or --backend docker for /run_jupyter"
        )
        return _Answer(404, json.dumps({"detail": detail}).encode())

    async def execute_cells(body: RunJupyterRequest) -> _Answer:
        if (refusal := no_kernels()) is not None:
            return refusal
        try:
            # The session is claimed before a run slot: an unknown id or a full server is answered
            # at once, with its own status, instead of after a wait (by then only as a 200 body).
            async with kernels.claim(body.session_id) as kept, gate.slot():
                response = await kernels.run(body, kept, pod_name)
        except UnknownSession as exc:
            return _Answer(404, json.dumps({"detail": str(exc)}).encode())
        except SessionsFull as exc:
            return _sessions_full(exc)
        except QueueTimeout:
            return _saturated(f"server busy: no run slot freed up within {gate.queue_timeout:g}s; retry later")
        except InvalidRequest as exc:
            return _unprocessable("body", str(exc), None)
        except SandboxError as exc:
            log.warning("jupyter cells failed on the infrastructure side: %s", exc)
            return _jupyter_error(f"{exc.kind}: {exc}", pod_name, body.session_id)
        except Exception as exc:  # a backend bug: report it as an infra error, keep serving
            log.exception("backend %s raised unexpectedly", pool.backend.name)
            return _jupyter_error(f"internal error: {type(exc).__name__}: {exc}", pod_name, body.session_id)
        return _Answer(200, response.model_dump_json().encode())

    @app.post(
        "/run_jupyter",
        response_model=RunJupyterResponse,
        responses={
            404: {"description": "session_id was not issued by this server"},
            429: {"description": "the session must be made anew and max_sessions are live (with Retry-After)"},
            504: {"description": "the server holds as many requests as it may; retry"},
        },
    )
    async def run_jupyter(body: RunJupyterRequest) -> Response:
        """Run notebook cells in one Python interpreter (Sandbox Fusion's fields).

        Without ``session_id`` the interpreter lives for this request only (Sandbox Fusion's rule).
        With an id from ``POST /run_jupyter/sessions`` (a sandboxkit extension) the interpreter and
        its files are kept for the next request with that id, until ``kernel_ttl_s`` idle seconds pass.
        """
        return await respond(execute_cells(body))

    @app.post(
        "/run_jupyter/sessions",
        status_code=201,
        responses={429: {"description": "max_sessions kept sessions are live (with Retry-After)"}},
    )
    async def open_jupyter_session() -> Response:
        """Open a kept ``/run_jupyter`` session; its ``session_id`` is the credential to use and close it."""
        if (refusal := no_kernels()) is not None:
            answer = refusal
        else:
            try:
                body = {"session_id": await kernels.open(), "kernel_ttl_s": kernels.ttl_s}
                answer = _Answer(201, json.dumps(body).encode())
            except SessionsFull as exc:
                answer = _sessions_full(exc)
        return Response(answer.body, status_code=answer.status, media_type=_JSON, headers=answer.headers)

    @app.delete("/run_jupyter/sessions/{session_id}", responses={404: {"description": "never issued here"}})
    async def close_jupyter_session(session_id: str) -> Response:
        """Close a kept ``/run_jupyter`` session now (its kernel and files); ``closed`` is false if already gone."""
        try:
            body = {"session_id": session_id, "closed": await kernels.close(session_id)}
        except UnknownSession as exc:
            return Response(json.dumps({"detail": str(exc)}), status_code=404, media_type=_JSON)
        return Response(json.dumps(body), media_type=_JSON)

    add_not_provided_routes(app)
    return app


async def _heartbeats(
    task: asyncio.Future[_Answer], every: float, metrics: ServerMetrics, pod_name: str | None
) -> AsyncIterator[bytes]:
    """A space every ``every`` seconds until ``task`` is done, then its JSON (as a 200 body).

    The status line (200) is already sent, so an answer that would have been another status
    (a queue timeout) becomes a ``SandboxError`` body. A client that goes away cancels the run.
    """
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                break
            yield b" "
        answer = task.result()
        if answer.status != 200:
            answer = _sandbox_error(
                f"HTTP {answer.status} after the response had started: {answer.body!r:.300}", pod_name
            )
        metrics.answered(answer.status, answer.body, streamed=True)
        yield answer.body
    finally:
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task
            metrics.abandoned()


def _runs(supported: frozenset[str], language: str) -> bool:
    try:
        return resolve_language(language).name in supported
    except InvalidRequest:
        return False


def _sandbox_fusion_languages(supported: frozenset[str]) -> list[str]:
    return sorted(LANGUAGES[name].sandbox_fusion or name if name in LANGUAGES else name for name in supported)


def _unprocessable(field: str, message: str, value: Any) -> _Answer:
    # The same shape FastAPI gives its own validation errors, so clients parse one format.
    loc = ["body"] if field == "body" else ["body", field]
    detail = {"detail": [{"type": "value_error", "loc": loc, "msg": message, "input": value}]}
    return _Answer(422, json.dumps(detail).encode())


def _sessions_full(exc: SessionsFull) -> _Answer:
    return _Answer(429, json.dumps({"detail": str(exc)}).encode(), {"Retry-After": str(exc.retry_after_s)})


def _saturated(message: str) -> _Answer:
    return _Answer(504, json.dumps({"detail": message}).encode(), {"Retry-After": "1"})


def _jupyter_error(message: str, pod_name: str | None, session_id: str | None) -> _Answer:
    body = RunJupyterResponse(
        status=RunStatus.SandboxError, message=message, executor_pod_name=pod_name, session_id=session_id
    )
    return _Answer(200, body.model_dump_json().encode())


def _sandbox_error(message: str, pod_name: str | None) -> _Answer:
    body = RunCodeResponse(status=RunStatus.SandboxError, message=message, executor_pod_name=pod_name)
    return _Answer(200, body.model_dump_json().encode())
