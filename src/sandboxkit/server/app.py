"""The Sandbox Fusion-compatible HTTP app: ``POST /run_code`` and ``GET /v1/ping`` over any backend.

Behaviour that clients depend on, kept from Sandbox Fusion: field names and status strings
(see :mod:`sandboxkit.protocols.sandbox_fusion`), HTTP 200 for ``Success``, ``Failed`` *and*
``SandboxError``, HTTP 422 with FastAPI's ``{"detail": [...]}`` body for invalid input
(malformed JSON, unknown language), ``"pong"`` on ``/v1/ping``, OpenAPI at ``/docs``.

What sandboxkit adds:

* a real bound on runs in flight (:class:`~sandboxkit.server.gate.Gate`) with a bounded,
  timed queue; an overflowing or timed-out wait answers **504**, which verl retries;
* a request-size limit answered with **413 Payload Too Large** (the HTTP status meant for it;
  verl and the ``sandbox-fusion`` client treat any non-200 as an error, so 413 and 422 are
  equally safe for them, and 413 tells an operator what happened);
* ``..`` and absolute paths in ``files`` / ``fetch_files`` rejected with 422 (Sandbox Fusion
  writes absolute paths wherever they point);
* output is never cut silently: results carry ``stdout_truncated`` / ``stderr_truncated`` and
  a ``message``;
* ``GET /v1/stats``: the gate's and the pool's counters.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, RedirectResponse, Response

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
from sandboxkit.server.gate import Gate, QueueFull, QueueTimeout
from sandboxkit.server.limits import BodySizeLimit

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
_JSON = "application/json"


def create_app(
    pool_or_backend: SandboxPool | Backend | str = "subprocess",
    max_concurrency: int = 64,
    queue_timeout: float = 10.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    *,
    max_queue: int | None = None,
    limits: Limits | None = None,
    backend_options: Mapping[str, Any] | None = None,
    run_grace_s: float = 30.0,
) -> FastAPI:
    """Build the app.

    Args:
        pool_or_backend: a :class:`SandboxPool` (used as is, not closed by the app), or a
            backend (instance or registered name) for which the app opens and closes a pool.
        max_concurrency: runs in flight at once (and the pool's cap when the app makes it).
        queue_timeout: seconds a request may wait for a slot before a 504.
        max_body_bytes: largest request body; larger ones get 413.
        max_queue: requests that may wait at once (default ``16 * max_concurrency``); more get 504.
        limits: default limits of a run (memory, pids, output cap...); the request's timeouts and
            a positive ``memory_limit_MB`` override them.
        backend_options: options for the backend when it is given by name.
        run_grace_s: a run that has not returned ``compile_timeout + run_timeout + run_grace_s``
            seconds after it started is abandoned and answered as ``SandboxError``.

    Raises:
        BackendNotFound / BackendUnavailable: the backend cannot be built.
        InvalidRequest: a bound is out of range.
    """
    if max_body_bytes < 1:
        raise InvalidRequest(f"max_body_bytes must be positive, got {max_body_bytes!r}")
    try:  # checked before a pool (and its backend) exists, so a bad bound leaks nothing
        gate = Gate(max_concurrency, max_queue if max_queue is not None else 16 * max_concurrency, queue_timeout)
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

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        log.info("serving backend %s, max_concurrency=%d, languages=%s", pool.backend.name, max_concurrency, languages)
        try:
            yield
        finally:
            if owns_pool:
                await pool.aclose()

    app = FastAPI(
        title="sandboxkit (Sandbox Fusion-compatible API)",
        description=(
            f"Runs code on the **{pool.backend.name}** backend. Languages (Sandbox Fusion names): "
            f"{', '.join(languages)}. At most {max_concurrency} runs in flight; a request that waits longer "
            f"than {queue_timeout:g}s for a slot gets 504."
        ),
        lifespan=lifespan,
    )
    app.add_middleware(BodySizeLimit, max_body_bytes=max_body_bytes)
    app.state.pool = pool
    app.state.gate = gate

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
        return {"gate": vars(gate.statistics()), "pool": pool.metrics()}

    @app.post(
        "/run_code",
        response_model=RunCodeResponse,
        responses={
            413: {"description": "request body larger than the server's limit"},
            504: {"description": "no run slot freed up within the queue timeout, or the queue is full; retry"},
        },
    )
    async def run_code(body: RunCodeRequest) -> Response:
        """Run code once: compile if needed, run with stdin, fetch files.

        HTTP 200 for ``Success``, ``Failed`` and ``SandboxError``; 422 for invalid input; 504
        when the server is saturated.
        """
        if not _runs(supported, body.language):
            msg = (
                f"language {body.language!r} is not available; this server ({pool.backend.name} backend) "
                f"runs: {', '.join(languages)}"
            )
            return _unprocessable("language", msg, body.language)
        try:
            request = request_from_sandbox_fusion(body, default_limits)
        except FieldError as exc:
            return _unprocessable(exc.field, exc.message, None)
        try:
            async with gate.slot():
                deadline = request.limits.compile_timeout_s + request.limits.timeout_s + run_grace_s
                result = await pool.run(request, deadline_s=deadline)
        except QueueFull:
            return _saturated(f"server busy: {gate.max_queue} requests already waiting for a run slot; retry later")
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
        return Response(response.model_dump_json(), media_type=_JSON)

    return app


def _runs(supported: frozenset[str], language: str) -> bool:
    try:
        return resolve_language(language).name in supported
    except InvalidRequest:
        return False


def _sandbox_fusion_languages(supported: frozenset[str]) -> list[str]:
    return sorted(LANGUAGES[name].sandbox_fusion or name if name in LANGUAGES else name for name in supported)


def _unprocessable(field: str, message: str, value: Any) -> JSONResponse:
    # The same shape FastAPI gives its own validation errors, so clients parse one format.
    loc = ["body"] if field == "body" else ["body", field]
    return JSONResponse({"detail": [{"type": "value_error", "loc": loc, "msg": message, "input": value}]}, 422)


def _saturated(message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, 504, headers={"Retry-After": "1"})


def _sandbox_error(message: str, pod_name: str | None) -> Response:
    body = RunCodeResponse(status=RunStatus.SandboxError, message=message, executor_pod_name=pod_name)
    return Response(body.model_dump_json(), media_type=_JSON)
