"""Health and observability: ``/`` (to the docs), ``GET /v1/ping``, ``GET /v1/stats``, ``GET /metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from sandboxkit.server.context import ServerContext

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
    async def stats() -> dict[str, Any]:
        """Admission counters and the pool's metrics."""
        return {
            "gate": vars(ctx.gate.statistics()),
            "admission": vars(ctx.admission.statistics()),
            "responses": ctx.metrics.response_counts(),
            "pool": ctx.pool.metrics(),
            "sessions": ctx.kernels.statistics(),
        }

    @routes.get("/metrics", include_in_schema=True)
    async def prometheus_metrics() -> Response:
        """The pool's and the server's metrics in Prometheus text format."""
        body, content_type = ctx.metrics.exposition()
        return Response(body, media_type=content_type)

    return routes
