"""What every router of one app shares: the pool, the gates in front of it, the counters.

Built once by :func:`sandboxkit.server.app.create_app` and handed to each router factory, so a
router is a plain function of its inputs (testable, no closure over the app factory's locals).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from sandboxkit.languages import LANGUAGES
from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool
from sandboxkit.server.admission import Admission
from sandboxkit.server.ceilings import Ceilings
from sandboxkit.server.gate import Gate
from sandboxkit.server.jupyter import KernelSessions
from sandboxkit.server.metrics import ServerMetrics
from sandboxkit.server.peers import Peers

__all__ = ["ServerContext"]


@dataclass(frozen=True)
class ServerContext:
    """One app's shared state.

    Attributes:
        pool: runs the code (the app's own, or the caller's).
        gate: run slots and the queue in front of them.
        admission: the memory bound on requests inside the server.
        metrics: response counters (``/v1/stats``, ``/metrics``).
        kernels: kept ``/run_jupyter`` sessions.
        ceilings: the most a request may ask for.
        default_limits: the limits a request starts from.
        heartbeat_s: seconds before a slow answer starts its whitespace heartbeat (None: never).
        run_grace_s: seconds past a run's own timeouts before it is abandoned.
        peers: the other workers of ``--workers N`` (None: this process is the whole server).
        pod_name: ``MY_POD_NAME`` (Sandbox Fusion's ``executor_pod_name``), if set.
    """

    pool: SandboxPool
    gate: Gate
    admission: Admission
    metrics: ServerMetrics
    kernels: KernelSessions
    ceilings: Ceilings
    default_limits: Limits
    heartbeat_s: float | None
    run_grace_s: float
    peers: Peers | None = None
    pod_name: str | None = field(default_factory=lambda: os.environ.get("MY_POD_NAME"))

    @property
    def languages(self) -> list[str]:
        """The Sandbox Fusion names of the languages this server runs (for messages and the OpenAPI text)."""
        supported = self.pool.backend.capabilities.languages
        return sorted(LANGUAGES[name].sandbox_fusion or name if name in LANGUAGES else name for name in supported)
