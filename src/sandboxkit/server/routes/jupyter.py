"""``POST /run_jupyter`` and its kept sessions (``POST /run_jupyter/sessions``, ``DELETE .../{id}``).

The sessions themselves (ids, expiry, the sandbox cap) live in :mod:`sandboxkit.server.jupyter`;
this module only maps them to HTTP: 404 for an id this server never issued (or a backend without
kernels), 429 with ``Retry-After`` when ``max_sessions`` are live, 504 when no run slot frees up.
"""

from __future__ import annotations

import json
import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.protocols.sandbox_fusion import RunStatus
from sandboxkit.server.admission import REFUSALS
from sandboxkit.server.answers import JSON, Answer, respond, saturated, unprocessable
from sandboxkit.server.context import ServerContext
from sandboxkit.server.gate import QueueTimeout
from sandboxkit.server.jupyter import RunJupyterRequest, RunJupyterResponse, SessionsFull, UnknownSession

__all__ = ["router"]

log = logging.getLogger("sandboxkit.server.app")


def router(ctx: ServerContext) -> APIRouter:
    """The ``/run_jupyter`` endpoints of one app."""
    routes = APIRouter()

    @routes.post(
        "/run_jupyter",
        response_model=RunJupyterResponse,
        responses={
            404: {"description": "session_id was not issued by this server"},
            429: {"description": "the session must be made anew and max_sessions are live (with Retry-After)"},
            **REFUSALS,
        },
    )
    async def run_jupyter(body: RunJupyterRequest, request: Request) -> Response:
        """Run notebook cells in one Python interpreter (Sandbox Fusion's fields).

        Without ``session_id`` the interpreter lives for this request only (Sandbox Fusion's rule).
        With an id from ``POST /run_jupyter/sessions`` (a sandboxkit extension) the interpreter and
        its files are kept for the next request with that id, until ``kernel_ttl_s`` idle seconds pass.
        """
        holder = _holder(ctx, body.session_id)
        if holder is not None:  # the session lives in another worker: it answers, and counts the answer
            forwarded = _forward(ctx, holder, "POST", "/run_jupyter", body.model_dump_json().encode(), request)
            return await respond(forwarded, ctx.heartbeat_s, None, ctx.pod_name)
        return await respond(execute_cells(ctx, body), ctx.heartbeat_s, ctx.metrics, ctx.pod_name)

    @routes.post(
        "/run_jupyter/sessions",
        status_code=201,
        responses={429: {"description": "max_sessions kept sessions are live (with Retry-After)"}},
    )
    async def open_jupyter_session() -> Response:
        """Open a kept ``/run_jupyter`` session; its ``session_id`` is the credential to use and close it."""
        if (refusal := _no_kernels(ctx)) is not None:
            return refusal.response()
        try:
            body = {"session_id": await ctx.kernels.open(), "kernel_ttl_s": ctx.kernels.ttl_s}
        except SessionsFull as exc:
            return _sessions_full(exc).response()
        return Answer(201, json.dumps(body).encode()).response()

    @routes.delete("/run_jupyter/sessions/{session_id}", responses={404: {"description": "never issued here"}})
    async def close_jupyter_session(session_id: str, request: Request) -> Response:
        """Close a kept ``/run_jupyter`` session now (its kernel and files); ``closed`` is false if already gone."""
        holder = _holder(ctx, session_id)
        if holder is not None:
            path = f"/run_jupyter/sessions/{session_id}"
            return (await _forward(ctx, holder, "DELETE", path, b"", request)).response()
        try:
            body = {"session_id": session_id, "closed": await ctx.kernels.close(session_id)}
        except UnknownSession as exc:
            return Response(json.dumps({"detail": str(exc)}), status_code=404, media_type=JSON)
        return Response(json.dumps(body), media_type=JSON)

    return routes


async def execute_cells(ctx: ServerContext, body: RunJupyterRequest) -> Answer:
    """One ``/run_jupyter`` request's answer; never raises (a backend bug is a ``SandboxError`` body)."""
    if (refusal := _no_kernels(ctx)) is not None:
        return refusal
    try:
        # The session is claimed before a run slot: an unknown id or a full server is answered
        # at once, with its own status, instead of after a wait (by then only as a 200 body).
        async with ctx.kernels.claim(body.session_id) as kept, ctx.gate.slot():
            response = await ctx.kernels.run(body, kept, ctx.pod_name)
    except UnknownSession as exc:
        return Answer(404, json.dumps({"detail": str(exc)}).encode())
    except SessionsFull as exc:
        return _sessions_full(exc)
    except QueueTimeout:
        return saturated(f"server busy: no run slot freed up within {ctx.gate.queue_timeout_s:g}s; retry later")
    except InvalidRequest as exc:
        return unprocessable("body", str(exc), None)
    except SandboxError as exc:
        log.warning("jupyter cells failed on the infrastructure side: %s", exc)
        return _jupyter_error(f"{exc.kind}: {exc}", ctx.pod_name, body.session_id)
    except Exception as exc:  # a backend bug: report it as an infra error, keep serving
        log.exception("backend %s raised unexpectedly", ctx.pool.backend.name)
        return _jupyter_error(f"internal error: {type(exc).__name__}: {exc}", ctx.pod_name, body.session_id)
    return Answer(200, response.model_dump_json().encode())


def _holder(ctx: ServerContext, session_id: str | None) -> int | None:
    """The other worker that holds kept session ``session_id``; None when it is this one (or no session)."""
    if ctx.peers is None or session_id is None:
        return None
    owner = ctx.kernels.ids.owner(session_id)
    if owner is None or owner == ctx.peers.me.index or not 0 <= owner < ctx.peers.me.count:
        return None  # this worker answers (an id nobody issued: 404 here)
    return owner


async def _forward(ctx: ServerContext, worker: int, method: str, path: str, body: bytes, request: Request) -> Answer:
    """The answer of worker ``worker`` to this request; 503 while that worker is being replaced."""
    import httpx

    assert ctx.peers is not None
    headers = {**dict(request.headers), "content-type": "application/json"}
    try:
        status, content, extra = await ctx.peers.forward(worker, method, path, body, headers)
    except httpx.HTTPError as exc:
        log.warning("worker %d holds the session but did not answer: %s", worker, exc)
        detail = f"the worker that holds this session did not answer ({type(exc).__name__}); retry"
        return Answer(503, json.dumps({"detail": detail}).encode(), {"Retry-After": "1"})
    return Answer(status, content, extra or None)


def _no_kernels(ctx: ServerContext) -> Answer | None:
    """A 404 when the backend has no Python kernels, else None."""
    if ctx.pool.backend.capabilities.kernels:
        return None
    detail = (
        f"the {ctx.pool.backend.name} backend has no Python kernels; serve with "
        "--backend subprocess or --backend docker for /run_jupyter"
    )
    return Answer(404, json.dumps({"detail": detail}).encode())


def _sessions_full(exc: SessionsFull) -> Answer:
    return Answer(429, json.dumps({"detail": str(exc)}).encode(), {"Retry-After": str(exc.retry_after_s)})


def _jupyter_error(message: str, pod_name: str | None, session_id: str | None) -> Answer:
    body = RunJupyterResponse(
        status=RunStatus.SandboxError, message=message, executor_pod_name=pod_name, session_id=session_id
    )
    return Answer(200, body.model_dump_json().encode())
