"""The pool's one decision about workers: none (one process), or a :class:`WorkerSet` of N."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sandboxkit._workers._spec import Recipe, recipe_of, resolve_processes
from sandboxkit.base import Backend

if TYPE_CHECKING:
    from sandboxkit._workers._set import PoolView, WorkerSet
    from sandboxkit.configs import BaseBackendConfig

__all__ = ["plan_workers"]


def plan_workers(
    pool: PoolView,
    processes: int | str | None,
    backend: str | Backend | BaseBackendConfig,
    backend_options: Mapping[str, Any] | None,
) -> WorkerSet | None:
    """The workers ``pool`` will start (``None``: the pool runs in this process only).

    Called from the pool's constructor, after its limiter exists and before its lease core
    attaches to it: with workers, the pool's limiter becomes the :class:`SharedLimiter` returned
    as ``workers.limiter``. Nothing starts here; the workers start with the pool.

    Raises:
        InvalidRequest: ``processes`` is invalid, or asks for workers a backend object cannot have.
    """
    recipe = recipe_of(backend) if isinstance(backend, Backend) else Recipe(backend, dict(backend_options or {}))
    count = resolve_processes(processes, max_concurrency=pool.max_concurrency, recipe=recipe, name=pool.backend.name)
    if count == 1 or recipe is None:
        return None
    from sandboxkit._workers._set import WorkerSet
    from sandboxkit._workers._shared import SharedLimiter

    return WorkerSet(pool, count, recipe, SharedLimiter(pool._limiter))
