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
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import FastAPI

from sandboxkit._request import renamed
from sandboxkit.base import Backend
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool
from sandboxkit.server.admission import Admission, AdmissionMiddleware
from sandboxkit.server.auth import BearerTokenMiddleware, check_token
from sandboxkit.server.ceilings import Ceilings
from sandboxkit.server.context import ServerContext
from sandboxkit.server.gate import Gate
from sandboxkit.server.jupyter import KernelSessions, SessionIds
from sandboxkit.server.metrics import ServerMetrics
from sandboxkit.server.not_provided import add_not_provided_routes
from sandboxkit.server.peers import Peers, WorkerIdentity
from sandboxkit.server.routes import health, jupyter, run_code
from sandboxkit.server.shared import SharedAdmission, SharedGate

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_QUEUE", "DEFAULT_MAX_QUEUE_BYTES", "create_app"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_QUEUE = 4096
DEFAULT_MAX_QUEUE_BYTES = 256 * 1024 * 1024


def create_app(
    pool_or_backend: SandboxPool | Backend | str = "subprocess",
    max_concurrency: int = 64,
    queue_timeout_s: float | None = None,
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
    queue_timeout: float | None = None,
    worker: WorkerIdentity | None = None,
) -> FastAPI:
    """Build the app.

    Args:
        pool_or_backend: a :class:`SandboxPool` (used as is, not closed by the app), or a
            backend (instance or registered name) for which the app opens and closes a pool.
        max_concurrency: runs in flight at once (and the pool's cap when the app makes it).
        queue_timeout_s: seconds a request may wait for a slot; default None: as long as its
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
        queue_timeout: the deprecated old name of ``queue_timeout_s``.
        worker: set in each worker process of ``sandboxkit serve --workers N``
            (:mod:`sandboxkit.server.supervisor`): run slots and admission then come from the
            supervisor's broker, so ``max_concurrency``, ``max_queue`` and ``max_queue_bytes``
            bound the whole server, and so does ``max_sessions``.

    Raises:
        BackendNotFound / BackendUnavailable: the backend cannot be built.
        InvalidRequest: a bound is out of range.
    """
    queue_timeout_s = renamed(queue_timeout_s, queue_timeout, "queue_timeout", where="create_app")
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
        gate: Gate
        admission: Admission
        if worker is None:
            gate = Gate(max_concurrency, queue_timeout_s)
            admission = Admission(max_concurrency + queue, max_queue_bytes, max_body_bytes, body_timeout_s)
        else:
            gate = SharedGate(worker.link, max_concurrency, queue_timeout_s)
            admission = SharedAdmission(
                worker.link, max_concurrency + queue, max_queue_bytes, max_body_bytes, body_timeout_s
            )
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
    metrics = ServerMetrics(pool, gate, admission)
    ids, peers, seats = None, None, None
    if worker is not None:
        ids, peers, seats = SessionIds(worker.session_key, worker.index), Peers(worker), worker.link
    kernels = KernelSessions(
        pool,
        ttl_s=kernel_ttl_s,
        max_sessions=max_sessions,
        max_total_s=ceilings.run_timeout_s,
        ids=ids,
        seats=seats,
    )
    beat = heartbeat_s or None
    ctx = ServerContext(
        pool, gate, admission, metrics, kernels, ceilings, limits or pool.limits, beat, run_grace_s, peers
    )
    languages = ctx.languages

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
            if peers is not None:
                await peers.aclose()
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

    for routes in (health.router(ctx), run_code.router(ctx), jupyter.router(ctx)):
        app.include_router(routes)
    add_not_provided_routes(app)
    return app
