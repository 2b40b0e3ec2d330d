"""How an endpoint's result becomes an HTTP response: plainly, or after heartbeats.

Shared by the ``/run_code`` and ``/run_jupyter`` routers. A run's outcome is first an
:class:`Answer` (status, JSON body, headers) so that one function, :func:`respond`, decides how
it reaches the client: a plain response when it is ready within ``heartbeat_s``, else a 200 that
sends a space every ``heartbeat_s`` until the JSON follows (issue 18: verl scores a request that
got no answer as wrong, so a long wait must never let the client's read timer fire).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from fastapi.responses import Response, StreamingResponse

from sandboxkit.protocols.sandbox_fusion import RunCodeResponse, RunStatus
from sandboxkit.server.metrics import ServerMetrics

__all__ = ["JSON", "Answer", "respond", "sandbox_error", "saturated", "unprocessable"]

JSON = "application/json"


@dataclass
class Answer:
    """What a run produced, before it is written as a response: a status, a JSON body, headers."""

    status: int
    body: bytes
    headers: dict[str, str] | None = None

    def response(self) -> Response:
        """This answer as a plain (non-streamed) JSON response."""
        return Response(self.body, status_code=self.status, media_type=JSON, headers=self.headers)


async def respond(
    work: Awaitable[Answer], heartbeat_s: float | None, metrics: ServerMetrics | None, pod_name: str | None
) -> Response:
    """The answer, or (past ``heartbeat_s``) a 200 that sends whitespace until the answer.

    ``metrics`` None: not counted here (a request forwarded to the worker that counts it).
    """
    task = asyncio.ensure_future(work)
    try:
        if heartbeat_s is not None:
            await asyncio.wait({task}, timeout=heartbeat_s)
        else:
            await asyncio.wait({task})
    except BaseException:
        task.cancel()
        raise
    if task.done():
        answer = task.result()
        if metrics is not None:
            metrics.answered(answer.status, answer.body, streamed=False)
        return answer.response()
    assert heartbeat_s is not None
    return StreamingResponse(_heartbeats(task, heartbeat_s, metrics, pod_name), media_type=JSON)


async def _heartbeats(
    task: asyncio.Future[Answer], every: float, metrics: ServerMetrics | None, pod_name: str | None
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
            answer = sandbox_error(
                f"HTTP {answer.status} after the response had started: {answer.body!r:.300}", pod_name
            )
        if metrics is not None:
            metrics.answered(answer.status, answer.body, streamed=True)
        yield answer.body
    finally:
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task
            if metrics is not None:
                metrics.abandoned()


def unprocessable(field: str, message: str, value: Any) -> Answer:
    """A 422 in the shape FastAPI gives its own validation errors, so clients parse one format."""
    loc = ["body"] if field == "body" else ["body", field]
    detail = {"detail": [{"type": "value_error", "loc": loc, "msg": message, "input": value}]}
    return Answer(422, json.dumps(detail).encode())


def saturated(message: str) -> Answer:
    """A 504 with ``Retry-After``: the server is full (every known client retries it)."""
    return Answer(504, json.dumps({"detail": message}).encode(), {"Retry-After": "1"})


def sandbox_error(message: str, pod_name: str | None) -> Answer:
    """A ``/run_code`` infrastructure failure: HTTP 200 with status ``SandboxError`` (Sandbox Fusion's rule)."""
    body = RunCodeResponse(status=RunStatus.SandboxError, message=message, executor_pod_name=pod_name)
    return Answer(200, body.model_dump_json().encode())
