"""``Checkpoint``: a session's state frozen once, from which many sessions start (``pool.fork``).

GRPO samples N rollouts from one starting state (a repository checked out, dependencies
installed) and tree search branches mid-episode. Rebuilding that state per rollout costs what
building it cost; a checkpoint pays once, and each fork is as cheap as the backend allows
(copy-on-write layers on the subprocess backend, an image layer on Docker, the service's own
snapshot in the cloud).

A checkpoint holds backend resources (a tmpfs, an image, a cloud snapshot), so its lifetime is
explicit: ``async with`` or :meth:`Checkpoint.release`. The pool counts the open ones in
``metrics()`` and releases what is left when it closes (Ctrl-C included); ``cleanup`` removes
what a crashed process left. Sessions forked from a checkpoint do not depend on it: releasing
it, or closing the session it was taken from, leaves them working.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import anyio

from sandboxkit.base import Snapshot
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits

if TYPE_CHECKING:
    from sandboxkit._lease import LeaseCore

__all__ = ["Checkpoint", "check_forkable"]


def check_forkable(core: LeaseCore) -> None:
    """Raise ``InvalidRequest`` when the pool's backend cannot fork (before anything is opened)."""
    if core.backend.capabilities.fork == "none":
        raise InvalidRequest(
            f"backend {core.backend.name!r} cannot checkpoint or fork sessions (capabilities.fork is 'none'); "
            "use subprocess, docker, e2b or daytona, or open fresh sessions and rebuild the state",
            backend=core.backend.name,
        )


class Checkpoint:
    """A frozen copy of a session: its files, its working directory and environment for ``exec``.

    Made by :meth:`Session.checkpoint`; used by :meth:`SandboxPool.fork` and
    ``pool.session(from_checkpoint=...)``. What else it carries (processes, memory) is the
    backend's ``capabilities.fork`` level.

    Attributes:
        id: the backend's identifier of the frozen copy.
        backend_name: the backend it belongs to.
        limits: limits of the session it was taken from (sessions forked from it get them).
        cwd: default working directory of ``exec`` in sessions forked from it.
        env: environment variables added to every ``exec`` in sessions forked from it.
    """

    def __init__(
        self,
        core: LeaseCore,
        snapshot: Snapshot,
        *,
        limits: Limits,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._core = core
        self.snapshot = snapshot
        self.id = snapshot.id
        self.backend_name = core.backend.name
        self.limits = limits
        self.cwd = cwd
        self.env: Mapping[str, str] = MappingProxyType(dict(env or {}))
        self.released = False
        core.checkpoints.add(self)
        core.metrics.checkpoint_taken()

    def check_usable(self, core: LeaseCore) -> None:
        """Raise ``InvalidRequest`` unless sessions of ``core``'s pool can start from this checkpoint."""
        if core is not self._core:
            raise InvalidRequest(
                f"checkpoint {self.id} belongs to another pool; fork it with the pool that took it",
                backend=self.backend_name,
            )
        if self.released:
            raise InvalidRequest(
                f"checkpoint {self.id} was released; fork before releasing it, or take a new one",
                backend=self.backend_name,
            )

    async def __aenter__(self) -> Checkpoint:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    async def release(self) -> None:
        """Free the frozen copy. Idempotent, shielded; sessions forked from it keep working."""
        if self.released:
            return
        self.released = True
        self._core.checkpoints.discard(self)
        self._core.metrics.checkpoint_released()
        with anyio.CancelScope(shield=True):
            await self.snapshot.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Checkpoint {self.id} backend={self.backend_name!r} {state}>"
