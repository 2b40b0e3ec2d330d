"""Spillover between backends: one pool over several backends, in order of priority, each capped.

A run at fleet scale hits one provider's quota while another has room. :class:`SpilloverBackend`
is a backend made of *tiers* (``local subprocess up to 64, then Daytona up to the account's
quota, then E2B``): :meth:`~SpilloverBackend.open` takes the first tier with room, and a tier
that is full (its cap, or the quota it last answered with ``CapacityExceeded``) or that refuses
(``RateLimited``, ``BackendUnavailable``) sends the sandbox to the next. Only when every tier is
full does it raise ``CapacityExceeded``, so the pool above queues until one of its sandboxes
closes, as it does for one backend at its quota.

Because the choice is made when a sandbox opens, a session stays on the backend it opened on,
and every result names the backend that ran it (``RunResult.backend``): metrics and the judge's
summary count per backend from that. The learned quota of a tier is the number of its sandboxes
this backend held when the service refused one (how many the account really allows, whatever
it nominally is); it is forgotten after ``relearn_s`` so a raised quota is found again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandboxkit.base import Backend, Capabilities, OutputCallback, Sandbox, Snapshot
from sandboxkit.errors import BackendUnavailable, CapacityExceeded, InvalidRequest, RateLimited
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult

__all__ = ["SpilloverBackend", "Tier"]


@dataclass
class Tier:
    """One backend of a spillover pool.

    Attributes:
        backend: the backend.
        cap: most sandboxes open on it at once (None: as many as the service allows).
        live: sandboxes of this tier open now.
        learned: sandboxes it held when the service last refused one (its real quota), or None.
        learned_at: when ``learned`` was set (``time.monotonic``).
    """

    backend: Backend
    cap: int | None = None
    live: int = 0
    learned: int | None = None
    learned_at: float = field(default=0.0)
    opened: int = 0

    def has_room(self, relearn_s: float) -> bool:
        if self.learned is not None and time.monotonic() - self.learned_at > relearn_s:
            self.learned = None
        bound = (
            min(b for b in (self.cap, self.learned) if b is not None)
            if (self.cap, self.learned) != (None, None)
            else None
        )
        return bound is None or self.live < bound


class _Placed(Sandbox):
    """A tier's sandbox, which gives its tier's place back when it closes."""

    def __init__(self, inner: Sandbox, tier: Tier) -> None:
        self._inner, self._tier = inner, tier
        self.id, self.backend_name = inner.id, inner.backend_name
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # backend-specific extras (limits, root...)

    async def run(
        self, request: RunRequest, *, on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None
    ) -> RunResult:
        return await self._inner.run(request, on_stdout=on_stdout, on_stderr=on_stderr)

    async def exec_request(
        self, request: ExecRequest, *, on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None
    ) -> ExecResult:
        # Through ``exec``, not ``exec_request``: the tier's backend may be a plugin that implements only ``exec``.
        return await self._inner.exec(
            request.command, **request.exec_keywords(), on_stdout=on_stdout, on_stderr=on_stderr
        )

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        await self._inner.write_files(files)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return await self._inner.read_files(paths)

    async def alive(self) -> bool:
        return await self._inner.alive()

    async def reset(self) -> bool:
        return await self._inner.reset()

    async def snapshot(self) -> Snapshot:
        return await self._inner.snapshot()

    async def suspend(self) -> bool:
        return await self._inner.suspend()

    async def resume(self) -> None:
        await self._inner.resume()

    async def restore(self, snapshot: Snapshot) -> bool:
        return await self._inner.restore(snapshot)

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            if not self._closed:
                self._closed = True
                self._tier.live -= 1


class SpilloverBackend(Backend):
    """Several backends behind one, filled in order (see the module docstring).

    Args:
        tiers: backends in order of priority, each a :class:`Tier` (with its cap) or a backend.
        relearn_s: how long a tier's learned quota holds before the tier is tried again.

    Raises:
        InvalidRequest: no tier, or a cap below 1.
    """

    name = "spillover"

    def __init__(self, tiers: Sequence[Tier | Backend], *, relearn_s: float = 60.0) -> None:
        self.tiers = [t if isinstance(t, Tier) else Tier(t) for t in tiers]
        if not self.tiers or any(t.cap is not None and t.cap < 1 for t in self.tiers):
            raise InvalidRequest("a spillover backend needs at least one tier, each with a cap of 1 or more")
        self.relearn_s = relearn_s
        self._owner_ttl_s: float | None = None

    @property
    def capabilities(self) -> Capabilities:
        """What every tier can do: a row may land on any of them, so none is promised more."""
        caps = [t.backend.capabilities for t in self.tiers]
        first = caps[0]
        return Capabilities(
            languages=frozenset.intersection(*(frozenset(c.languages) for c in caps)),
            stateful=all(c.stateful for c in caps),
            network_control=all(c.network_control for c in caps),
            limits=frozenset.intersection(*(frozenset(c.limits) for c in caps)),
            resettable=all(c.resettable for c in caps),
            missing_protections=tuple(p for c in caps for p in c.missing_protections),
            streaming=all(c.streaming for c in caps),
            absolute_paths=all(c.absolute_paths for c in caps),
            kernels=False,
            fork="none" if any(c.fork != first.fork for c in caps) else first.fork,
            suspend="none" if any(c.suspend != first.suspend for c in caps) else first.suspend,
        )

    @property  # type: ignore[override]
    def owner_ttl_s(self) -> float | None:
        """The dead-man TTL the pool set; every tier gets it, since each one's sandboxes outlive a dead owner."""
        return self._owner_ttl_s

    @owner_ttl_s.setter
    def owner_ttl_s(self, value: float | None) -> None:
        self._owner_ttl_s = value
        for tier in self.tiers:
            tier.backend.owner_ttl_s = value

    def counts(self) -> dict[str, int]:
        """Sandboxes each tier opened so far, by backend name (the per-backend metric)."""
        out: dict[str, int] = {}
        for tier in self.tiers:
            out[tier.backend.name] = out.get(tier.backend.name, 0) + tier.opened
        return out

    async def open(self, limits: Limits | None = None) -> Sandbox:
        """A sandbox of the first tier with room; ``CapacityExceeded`` when every tier is full."""
        refused: list[str] = []
        for tier in self.tiers:
            if not tier.has_room(self.relearn_s):
                refused.append(f"{tier.backend.name}: full at {tier.live}")
                continue
            tier.live += 1
            try:
                inner = await tier.backend.open(limits)
            except CapacityExceeded as exc:
                tier.live -= 1
                tier.learned, tier.learned_at = max(1, tier.live), time.monotonic()
                refused.append(f"{tier.backend.name}: {exc}")
                continue
            except (RateLimited, BackendUnavailable) as exc:
                tier.live -= 1
                refused.append(f"{tier.backend.name}: {exc}")
                continue
            except BaseException:
                tier.live -= 1
                raise
            tier.opened += 1
            return _Placed(inner, tier)
        raise CapacityExceeded(
            "every backend of the spillover pool is full or refusing (" + "; ".join(refused) + "); "
            "the pool waits for one of its sandboxes to close",
            backend=self.name,
            limit=sum(t.live for t in self.tiers),
        )

    async def open_from(self, snapshot: Snapshot, limits: Limits | None = None) -> Sandbox:
        """A fork on the tier that took ``snapshot`` (a checkpoint never leaves its backend)."""
        for tier in self.tiers:
            if tier.backend.name == snapshot.backend_name:
                tier.live += 1
                try:
                    inner = await tier.backend.open_from(snapshot, limits)
                except BaseException:
                    tier.live -= 1
                    raise
                tier.opened += 1
                return _Placed(inner, tier)
        raise InvalidRequest(f"no tier of this spillover backend took snapshot {snapshot.id!r}", backend=self.name)

    async def aclose(self) -> None:
        for tier in self.tiers:
            await tier.backend.aclose()

    async def cleanup(self) -> int:
        return sum([await t.backend.cleanup() for t in self.tiers])

    def emergency_cleanup(self) -> None:
        for tier in self.tiers:
            tier.backend.emergency_cleanup()
