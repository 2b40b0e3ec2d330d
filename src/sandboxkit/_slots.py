"""The pool's bookkeeping objects, shared by the pool and its sessions."""

from __future__ import annotations

import time

from sandboxkit.base import Sandbox
from sandboxkit.limiter import Limiter
from sandboxkit.models import Limits

__all__ = ["CallSlot", "Entry"]


class CallSlot:
    """One call slot of the limiter, remembering whether it is held (it is given back while waiting)."""

    __slots__ = ("held", "limiter")

    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter
        self.held = False

    async def acquire(self) -> None:
        await self.limiter.acquire_call(self)
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.limiter.release_call(self)


class Entry:
    """A sandbox the pool owns, with its bookkeeping."""

    __slots__ = ("closed", "last_used", "limits", "sandbox", "slot", "uses")

    def __init__(self, sandbox: Sandbox, slot: object, limits: Limits | None = None) -> None:
        self.sandbox = sandbox
        self.slot = slot
        self.limits = limits  # what the sandbox was opened with (exec uses them)
        self.uses = 0
        self.last_used = time.monotonic()
        self.closed = False
