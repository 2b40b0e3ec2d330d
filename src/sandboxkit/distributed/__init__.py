"""Scale past one machine: cluster-wide caps and sandbox placement on Ray (extra ``[ray]``).

verl and rLLM run their reward and rollout workers as Ray actors. A per-process cap
multiplies by the number of workers (8 reward workers x 64 = 512 calls in flight against
a service sized for 64), and a cloud account's creation limit is per account. Here the
caps and the creation bucket live in one named Ray actor that every pool of the cluster
shares::

    ray.init(address="auto")
    async with SandboxPool("daytona", max_concurrency=64, creation_rate=5, limiter="ray") as pool:
        ...   # 64 is now the cap for the whole cluster, whichever worker runs this

and :class:`RayPlacedBackend` runs each sandbox on whichever node has free CPUs (registered
as the ``ray`` backend through the package's entry point: ``SandboxPool("ray", backend_options=...)``).

Nothing here imports Ray until it is used; ``import sandboxkit`` never does.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from sandboxkit.distributed._client import NAMESPACE, RayLimiter
from sandboxkit.distributed._ray import ray_ready
from sandboxkit.limiter import Limiter, LocalLimiter

if TYPE_CHECKING:
    from sandboxkit.distributed.placement import RayPlacedBackend

__all__ = [
    "NAMESPACE",
    "RayLimiter",
    "RayPlacedBackend",
    "limiter_name",
    "ray_limiter",
    "shutdown_limiter",
]

log = logging.getLogger("sandboxkit.distributed")

#: How long `shutdown_limiter` waits for a killed actor's name to be released (Ray releases it once the actor is dead).
_GONE_WAIT_S = 10.0

_warned_local = False
_warn_lock = threading.Lock()


def limiter_name(backend: str) -> str:
    """The actor name pools of ``backend`` share by default (``sandboxkit-limiter-<backend>``)."""
    return f"sandboxkit-limiter-{backend}"


def ray_limiter(
    max_calls: int,
    max_sandboxes: int | None = None,
    rate: float | None = None,
    burst: float | None = None,
    *,
    backend: str = "default",
    name: str | None = None,
    **options: Any,
) -> Limiter:
    """The limiter behind ``SandboxPool(..., limiter="ray")``: cluster-wide when Ray runs, local otherwise.

    When Ray is not installed or not initialised, this returns a process-local limiter with
    the same caps and logs a warning once per process, so the same training script runs on
    a laptop and on a cluster.

    Args:
        max_calls: calls in flight across the cluster.
        max_sandboxes: sandboxes open across the cluster.
        rate: sandbox creations per second across the cluster.
        burst: creations allowed at once.
        backend: the backend's name; pools of the same backend share one limiter by default.
        name: the limiter actor's name (default :func:`limiter_name` of ``backend``).
        **options: passed to :class:`RayLimiter` (``lease_ttl_s``, ``worker_max_calls``, ``linger_s``...).

    Raises:
        ValueError: a limit is out of range.
    """
    ready, why = ray_ready()
    if not ready:
        global _warned_local
        with _warn_lock:
            if not _warned_local:
                _warned_local = True
                log.warning(
                    "limiter='ray' requested but %s; using a per-process limiter, so max_concurrency=%d "
                    "applies to each process, not to the cluster",
                    why,
                    max_calls,
                )
        return LocalLimiter(max_calls, max_sandboxes, rate, burst)
    return RayLimiter(max_calls, max_sandboxes, rate, burst, name=name or limiter_name(backend), **options)


def shutdown_limiter(name: str, namespace: str = NAMESPACE) -> bool:
    """Remove a limiter actor now (it also exits by itself when unused). Returns whether one existed.

    Returns once the name is free (or after 10 s): a limiter opened after this call gets a fresh actor.

    Processes still using it reconnect to a fresh actor with their current holdings.
    """
    import ray

    try:
        actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    ray.kill(actor, no_restart=True)
    # ray.kill only asks: the name stays registered until the actor is dead, and a limiter opened
    # under it meanwhile would join the dying actor (and lose its grants with it). Return once it is gone.
    deadline = time.monotonic() + _GONE_WAIT_S
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            break
        time.sleep(0.01)
    return True


def __getattr__(name: str) -> Any:
    # Lazy re-exports: importing this package must not import Ray or the backends.
    if name == "RayPlacedBackend":
        from sandboxkit.distributed.placement import RayPlacedBackend

        return RayPlacedBackend
    raise AttributeError(f"module 'sandboxkit.distributed' has no attribute {name!r}")
