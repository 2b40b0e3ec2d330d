"""Sandbox Fusion endpoints that sandboxkit does not serve: a clear 404, so clients fail fast.

Without these routes a client would get FastAPI's bare ``{"detail": "Not Found"}`` and could take
the server for a misconfigured Sandbox Fusion. The list is every route of Sandbox Fusion's
``sandbox/server/server.py`` (the online-judge dataset API) except those sandboxkit serves
(``/run_code``, ``/run_jupyter``, ``/v1/ping``).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["DOCS_URL", "NOT_PROVIDED", "add_not_provided_routes"]

DOCS_URL = "docs/sandbox_fusion.md in the sandboxkit documentation (section: What is the same as Sandbox Fusion)"

#: Path -> (HTTP method in Sandbox Fusion, what it does there).
NOT_PROVIDED: dict[str, tuple[str, str]] = {
    "/list_datasets": ("GET", "lists the online-judge datasets"),
    "/list_ids": ("POST", "lists the problem ids of a dataset"),
    "/get_prompts": ("POST", "returns a dataset's prompts"),
    "/get_prompt_by_id": ("POST", "returns one prompt of a dataset"),
    "/submit": ("POST", "grades a completion against a dataset's tests"),
    "/get_metrics": ("POST", "returns a dataset's metrics"),
    "/get_metrics_function": ("POST", "returns a dataset's metrics function"),
}


def add_not_provided_routes(app: FastAPI) -> None:
    """Answer every path in :data:`NOT_PROVIDED` (any method) with a 404 that says why."""
    for path, (method, what) in NOT_PROVIDED.items():

        async def not_provided(
            request: Request, path: str = path, method: str = method, what: str = what
        ) -> JSONResponse:
            detail = (
                f"{method} {path} is a Sandbox Fusion endpoint that sandboxkit does not provide (in Sandbox Fusion it "
                f"{what}). sandboxkit serves POST /run_code, POST /run_jupyter, GET /v1/ping and GET /metrics; for grading against tests "
                f"use `sandboxkit grade` or sandboxkit.judge. See {DOCS_URL}"
            )
            return JSONResponse({"detail": detail, "provided_by_sandboxkit": False}, status_code=404)

        app.add_api_route(
            path,
            not_provided,
            methods=["GET", "POST", "PUT", "DELETE", "PATCH"],
            include_in_schema=False,
            name=f"not_provided{path.replace('/', '_')}",
        )
