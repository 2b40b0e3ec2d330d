"""``POST /run_code``: run code once (compile if needed, stdin, fetch files), Sandbox Fusion's contract.

HTTP 200 for ``Success``, ``Failed`` and ``SandboxError``; 422 for invalid input (the caller's
mistake); 504 with ``Retry-After`` when no run slot frees up in time.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import Response

from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.languages import resolve_language
from sandboxkit.protocols.sandbox_fusion import (
    FieldError,
    RunCodeRequest,
    RunCodeResponse,
    request_from_sandbox_fusion,
    result_to_sandbox_fusion,
)
from sandboxkit.server.admission import REFUSALS
from sandboxkit.server.answers import Answer, respond, sandbox_error, saturated, unprocessable
from sandboxkit.server.context import ServerContext
from sandboxkit.server.gate import QueueTimeout

__all__ = ["router"]

log = logging.getLogger("sandboxkit.server.app")


def router(ctx: ServerContext) -> APIRouter:
    """The ``/run_code`` endpoint of one app."""
    routes = APIRouter()

    @routes.post(
        "/run_code",
        response_model=RunCodeResponse,
        responses=REFUSALS,
    )
    async def run_code(body: RunCodeRequest) -> Response:
        """Run code once: compile if needed, run with stdin, fetch files.

        HTTP 200 for ``Success``, ``Failed`` and ``SandboxError``; 422 for invalid input; 504
        when the server is full. A long wait is answered 200 with whitespace before the JSON.
        """
        return await respond(execute(ctx, body), ctx.heartbeat_s, ctx.metrics, ctx.pod_name)

    return routes


async def execute(ctx: ServerContext, body: RunCodeRequest) -> Answer:
    """One ``/run_code`` request's answer; never raises (a backend bug is a ``SandboxError`` body)."""
    pool, gate = ctx.pool, ctx.gate
    if not _runs(pool.backend.capabilities.languages, body.language):
        msg = (
            f"language {body.language!r} is not available; this server ({pool.backend.name} backend) "
            f"runs: {', '.join(ctx.languages)}"
        )
        return unprocessable("language", msg, body.language)
    try:
        capped, notes = ctx.ceilings.apply(body)
        request = request_from_sandbox_fusion(capped, ctx.default_limits)
    except FieldError as exc:
        return unprocessable(exc.field, exc.message, None)
    try:
        async with gate.slot():
            deadline = request.limits.compile_timeout_s + request.limits.timeout_s + ctx.run_grace_s
            result = await pool.run(request, deadline_s=deadline)
    except QueueTimeout:
        return saturated(
            f"server busy: no run slot freed up within {gate.queue_timeout_s:g}s "
            f"({gate.max_concurrency} runs in flight); retry later"
        )
    except InvalidRequest as exc:
        return unprocessable("body", str(exc), None)
    except SandboxError as exc:
        log.warning("run failed on the infrastructure side: %s", exc)
        return sandbox_error(f"{exc.kind}: {exc}", ctx.pod_name)
    except Exception as exc:  # a backend bug: report it as an infra error, keep serving
        log.exception("backend %s raised unexpectedly", pool.backend.name)
        return sandbox_error(f"internal error: {type(exc).__name__}: {exc}", ctx.pod_name)
    response = result_to_sandbox_fusion(result, executor_pod_name=ctx.pod_name)
    if notes:
        response.message = "; ".join([*notes, *([response.message] if response.message else [])])
    return Answer(200, response.model_dump_json().encode())


def _runs(supported: frozenset[str], language: str) -> bool:
    try:
        return resolve_language(language).name in supported
    except InvalidRequest:
        return False
