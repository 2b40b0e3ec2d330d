"""How many host worker processes a pool uses, and how a worker rebuilds the pool's backend.

A worker cannot be handed the parent's backend object (it holds sockets, processes and
sandboxes of the parent); it builds its own from a *recipe*: the backend's name and options,
or its config. A pool made from a name or a config has one; a backend object has one when
:func:`sandboxkit.backend` made it (the registry records it here), not when user code
constructed it directly.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandboxkit.errors import InvalidRequest

if TYPE_CHECKING:
    from sandboxkit.base import Backend
    from sandboxkit.configs import BaseBackendConfig

__all__ = ["ENV", "MAX_AUTO", "Recipe", "recipe_of", "remember", "resolve_processes"]

#: The environment variable that sets ``processes`` for pools that leave it out (an integer or ``auto``).
ENV = "SANDBOXKIT_POOL_PROCESSES"
#: ``processes="auto"`` never starts more workers than this.
MAX_AUTO = 16
#: Below this ``max_concurrency`` a worker would have too few runs in flight to pay for itself.
RUNS_PER_WORKER = 4


@dataclass(frozen=True)
class Recipe:
    """What a worker passes to :func:`sandboxkit.backend` to build the same backend as the parent."""

    backend: str | BaseBackendConfig
    options: Mapping[str, Any] = field(default_factory=dict)


_recipes: weakref.WeakKeyDictionary[Backend, Recipe] = weakref.WeakKeyDictionary()


def remember(backend: Backend, recipe: Recipe) -> None:
    """Record how ``backend`` was built (called by :func:`sandboxkit.registry.backend`)."""
    try:
        _recipes[backend] = recipe
    except TypeError:  # an unhashable or unreferenceable plugin object: it cannot be rebuilt, that is all
        pass


def recipe_of(backend: Backend) -> Recipe | None:
    """How to build ``backend`` again in another process, or ``None`` if nobody recorded it."""
    return _recipes.get(backend)


def resolve_processes(asked: int | str | None, *, max_concurrency: int, recipe: Recipe | None, name: str) -> int:
    """The number of host worker processes for a pool (1: no workers, the pool runs in this process).

    Args:
        asked: the pool's ``processes`` argument; ``None`` reads :data:`ENV` (unset: 1).
        max_concurrency: the pool's call cap (each worker should have a few calls to serve).
        recipe: how a worker rebuilds the backend (``None``: it cannot, so one process).
        name: the backend's name, for error messages.

    Raises:
        InvalidRequest: ``asked`` is neither a positive integer nor ``"auto"``, or it asks for workers
            explicitly for a backend object that cannot be rebuilt in another process.
    """
    explicit = asked is not None
    value: int | str = asked if asked is not None else os.environ.get(ENV, "").strip() or 1
    if value == "auto":
        cores = os.cpu_count() or 1
        if cores <= 2 or recipe is None:
            return 1
        return max(1, min(cores - 1, max_concurrency // RUNS_PER_WORKER, MAX_AUTO))
    try:
        count = int(value) if not isinstance(value, bool) else 0
    except (TypeError, ValueError):
        count = 0
    if count < 1 or (isinstance(value, float)):
        where = "processes" if explicit else f"${ENV}"
        raise InvalidRequest(f"{where} must be a positive integer or 'auto', got {value!r}", backend=name)
    if count > 1 and recipe is None:
        if not explicit:
            return 1  # the switch is a default for pools that can have workers; this one cannot
        raise InvalidRequest(
            f"processes={count} needs a backend a worker process can build again: pass its name or config "
            f"(e.g. SandboxPool('{name}', processes={count})) instead of a backend object",
            backend=name,
        )
    return count
