"""Health and observability: ``/`` (to the docs), ``GET /v1/ping``, ``GET /v1/stats``, ``GET /metrics``."""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from sandboxkit.server.aggregate import merge_expositions, merge_stats, workers_exposition
from sandboxkit.server.context import ServerContext
from sandboxkit.server.peers import WORKER_SCOPE

__all__ = ["router"]


def router(ctx: ServerContext) -> APIRouter:
    """The health and metrics endpoints of one app."""
    routes = APIRouter()

    @routes.get("/", include_in_schema=False)
    async def index() -> RedirectResponse:
        return RedirectResponse("./docs")

    @routes.get("/v1/ping", response_model=str)
    async def ping() -> str:
        """Health check: always ``"pong"`` while the server is up."""
        return "pong"

    @routes.get("/v1/stats")
    async def stats(request: Request, scope: str = "server") -> dict[str, Any]:
        """Admission counters and the pool's metrics, of the whole server (``scope=worker``: this worker's)."""
        own = {
            "gate": vars(ctx.gate.statistics()),
            "admission": vars(ctx.admission.statistics()),
            "responses": ctx.metrics.response_counts(),
            "pool": ctx.pool.metrics(),
            "sessions": ctx.kernels.statistics(),
        }
        if ctx.peers is None:
            return own
        me = ctx.peers.me
        own["worker"] = {"index": me.index, "pid": os.getpid()}
        if scope == WORKER_SCOPE:
            return own
        per_worker = await ctx.peers.gather_json("/v1/stats", dict(request.headers))
        per_worker.insert(me.index, own)
        answers = [answer for answer in per_worker if answer is not None]
        merged = merge_stats(answers)
        merged.pop("worker", None)  # who answered: per_worker says it for each
        merged["workers"] = {"count": me.count, "answered": len(answers), **await me.link.statistics()}
        merged["per_worker"] = per_worker
        return merged

    @routes.get("/metrics", include_in_schema=True)
    async def prometheus_metrics(request: Request, scope: str = "server") -> Response:
        """The pool's and the server's metrics in Prometheus text format (summed over ``--workers``)."""
        body, content_type = ctx.metrics.exposition()
        if ctx.peers is None or scope == WORKER_SCOPE:
            return Response(body, media_type=content_type)
        others = [o for o in await ctx.peers.gather("/metrics", dict(request.headers)) if o is not None]
        broker = await ctx.peers.me.link.statistics()
        workers = workers_exposition(ctx.peers.me.count, 1 + len(others), broker["workers_restarted"])
        return Response(merge_expositions([body, *others, workers]), media_type=content_type)

    return routes
