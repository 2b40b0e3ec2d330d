"""The cluster-wide lease book, without Ray: caps, a FIFO of call requests, the creation bucket.

This is the state the limiter actor holds, kept free of I/O so it can be tested with a
fake clock. Every change is a method call from one owner (a ``RayLimiter`` in some
worker process); the actor wraps these calls and wakes the owners' long polls when
:attr:`LimiterCore.wake` says so.

Vocabulary:

* **owner**: one client limiter (one pool in one process), named by a random id.
* **request**: one wanted call slot, named by the owner (a request id). Requests wait in
  one cluster-wide FIFO, so a worker that backs off and asks again cannot be overtaken
  forever by busier workers: its request keeps its place, and each owner has at most
  ``max_calls`` requests queued, so one worker cannot flood the queue either.
* **grant**: a request that got a slot. Grants are delivered to the owner in the reply
  of its next message (usually its long poll); a grant cancelled before delivery is
  undone, so no slot is lost in transit.
* **lease**: what an owner holds (call slots, sandbox slots). It lives as long as the
  owner keeps talking (heartbeat) and its process is alive; after ``lease_ttl_s`` of
  silence, or as soon as the actor sees the owner's process died, it is returned.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LimiterConfig", "LimiterCore", "OwnerState"]

# A cancel that arrives before its request (messages may be reordered) is remembered this long.
_CANCEL_MEMORY_S = 300.0


@dataclass(frozen=True)
class LimiterConfig:
    """Cluster-wide limits held by one limiter actor.

    Attributes:
        max_calls: calls in flight across the cluster.
        max_sandboxes: sandboxes open across the cluster (``None``: no cap).
        creation_rate: sandbox creations per second across the cluster (``None``: unlimited).
        creation_burst: creations allowed at once before the rate applies.
        lease_ttl_s: how long an owner may stay silent before its leases are returned.
    """

    max_calls: int
    max_sandboxes: int | None = None
    creation_rate: float | None = None
    creation_burst: float | None = None
    lease_ttl_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_calls, int) or self.max_calls < 1:
            raise ValueError(f"max_calls must be an integer >= 1, got {self.max_calls!r}")
        if self.max_sandboxes is not None and self.max_sandboxes < 1:
            raise ValueError(f"max_sandboxes must be >= 1 or None, got {self.max_sandboxes!r}")
        if self.creation_rate is not None and self.creation_rate <= 0:
            raise ValueError(f"creation_rate must be positive or None, got {self.creation_rate!r}")
        if self.creation_burst is not None and self.creation_burst < 1:
            raise ValueError(f"creation_burst must be >= 1, got {self.creation_burst!r}")
        if self.lease_ttl_s <= 0:
            raise ValueError(f"lease_ttl_s must be positive, got {self.lease_ttl_s!r}")

    @property
    def heartbeat_s(self) -> float:
        """How often an owner that holds anything checks in: often enough to miss a few beats."""
        return max(0.05, min(5.0, self.lease_ttl_s / 6))

    @property
    def burst(self) -> float:
        return float(self.creation_burst if self.creation_burst is not None else max(1.0, self.creation_rate or 1.0))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OwnerState:
    """What the actor knows about one owner."""

    owner: str
    info: dict[str, Any]
    last_seen: float
    calls: int = 0
    sandboxes: int = 0
    granted: list[str] = field(default_factory=list)  # granted, not yet delivered
    reclaim: int = 0  # idle sandboxes we ask it to close, not yet delivered
    sandbox_grants: int = 0  # sandbox slots handed to it after a refusal, not yet delivered
    told_contended: bool = True  # the last contention state delivered to it
    told_keep: int = 0  # the last "you may keep this many for reuse" delivered to it
    alive_ref: Any = None  # an object the owner put; fetching it fails once the owner's process died
    ref_probed: bool = False  # the ref was fetched (and is now cached): ask the owner for a fresh one


class LimiterCore:
    """Caps and queue of one limiter; all methods are cheap and never block.

    Args:
        config: the limits.
        clock: monotonic seconds (injectable for tests).
        wake: called with an owner id when that owner has something to be told
            (a grant, a recall, a reclaim request); the actor ends its long poll.
    """

    def __init__(
        self,
        config: LimiterConfig,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.wake = wake or (lambda owner: None)
        self.owners: dict[str, OwnerState] = {}
        self.queue: OrderedDict[str, str] = OrderedDict()  # request id -> owner, oldest first
        self.queued_by_owner: Counter[str] = Counter()
        self.cancelled: dict[str, float] = {}
        self._replying_to: str | None = None
        self.departed: dict[str, float] = {}  # owners that left or died: late messages must not re-adopt them
        self.sandbox_waiters: OrderedDict[str, int] = OrderedDict()  # refused owners, oldest first
        self.calls_used = 0
        self.sandboxes_used = 0
        self._tat = clock()  # GCRA "theoretical arrival time" of the next creation
        self.granted_total = 0
        self.reaped_total = 0

    # ------------------------------------------------------------------ owners

    def configure(self, config: LimiterConfig) -> LimiterConfig:
        """Adopt ``config`` if nobody holds or waits for anything; return the config in force.

        The first pool to create the actor sets the limits; a later pool with other limits
        gets the limits in force (and a warning on its side). Once everyone has left, the
        next pool's limits replace them, so a new job does not inherit an old job's caps.
        """
        if config != self.config and not any(self._busy(o) for o in self.owners.values()):
            self.config = config
        return self.config

    @staticmethod
    def _busy(o: OwnerState) -> bool:
        return bool(o.calls or o.sandboxes)

    def touch(
        self, owner: str, holdings: tuple[int, int] | None = None, info: dict[str, Any] | None = None
    ) -> OwnerState:
        """Record that ``owner`` is alive; adopt it (with what it says it holds) if unknown.

        Adoption is how state survives a restarted actor or a lease that expired while its
        owner was only stalled: the owner's next message re-declares its holdings. Those
        count against the caps at once (grants pause until usage drops below them again).
        """
        now = self.clock()
        o = self.owners.get(owner)
        if o is None:
            o = OwnerState(owner, dict(info or {}), now)
            self.owners[owner] = o
            if holdings is not None:
                o.calls, o.sandboxes = max(0, holdings[0]), max(0, holdings[1])
                self.calls_used += o.calls
                self.sandboxes_used += o.sandboxes
        else:
            o.last_seen = now
            if info:
                o.info.update(info)
        return o

    def set_alive_ref(self, owner: str, ref: Any) -> None:
        o = self.owners.get(owner)
        if o is not None:
            o.alive_ref, o.ref_probed = ref, False

    def gone(self, owner: str) -> bool:
        """Whether ``owner`` left (or died): its late messages are ignored instead of re-adopting it."""
        return owner in self.departed

    def remove(self, owner: str, *, final: bool = False) -> OwnerState | None:
        """Forget an owner and return everything it held or waited for (a copy of its state is returned).

        ``final``: the owner left or its process died, so a message still in flight from it
        must not bring it back (a silent owner, by contrast, is re-adopted when it speaks).
        """
        if final:
            self.departed[owner] = self.clock()
            if len(self.departed) > 4096:
                cutoff = self.clock() - 3600
                self.departed = {k: t for k, t in self.departed.items() if t >= cutoff}
        o = self.owners.pop(owner, None)
        if o is None:
            return None
        snapshot = OwnerState(o.owner, o.info, o.last_seen, o.calls, o.sandboxes)
        self.calls_used -= o.calls  # undelivered grants are counted in o.calls already
        self.sandboxes_used -= o.sandboxes
        if self.queued_by_owner.pop(owner, 0):
            for rid in [r for r, who in self.queue.items() if who == owner]:
                del self.queue[rid]
        self.sandbox_waiters.pop(owner, None)
        o.calls, o.sandboxes, o.granted = 0, 0, []
        self._dispatch()
        self._grant_sandboxes()
        return snapshot

    # ------------------------------------------------------------------ calls

    def post(
        self,
        owner: str,
        *,
        requests: Iterable[str] = (),
        cancels: Iterable[str] = (),
        releases: int = 0,
        sandbox_releases: int = 0,
        holdings: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        """Apply one batched message from ``owner`` and return its reply.

        Releases come first (they free slots for the queue), then cancels, then new requests.
        """
        if self.gone(owner):
            return self.reply(owner)
        o = self.touch(owner, holdings)
        if releases:
            n = min(releases, o.calls)
            o.calls -= n
            self.calls_used -= n
        if sandbox_releases:
            n = min(sandbox_releases, o.sandboxes)
            o.sandboxes -= n
            self.sandboxes_used -= n
            if n:
                self._grant_sandboxes()
        for rid in cancels:
            self._cancel(o, rid)
        for rid in requests:
            if self.cancelled.pop(rid, None) is not None or rid in self.queue:
                continue
            self.queue[rid] = owner
            self.queued_by_owner[owner] += 1
        self._replying_to = owner
        try:
            self._dispatch()
        finally:
            self._replying_to = None
        self._expire_cancels()
        return self.reply(owner)

    def _cancel(self, o: OwnerState, rid: str) -> None:
        if self.queue.get(rid) == o.owner:
            del self.queue[rid]
            self.queued_by_owner[o.owner] -= 1
        elif rid in o.granted:  # granted but not delivered yet: undo, the owner never sees it
            o.granted.remove(rid)
            o.calls -= 1
            self.calls_used -= 1
            self._dispatch()
        else:  # not arrived yet (reordered), or already delivered (then it is the owner's spare)
            self.cancelled[rid] = self.clock()

    def _expire_cancels(self) -> None:
        if len(self.cancelled) > 1024:
            cutoff = self.clock() - _CANCEL_MEMORY_S
            self.cancelled = {r: t for r, t in self.cancelled.items() if t >= cutoff}

    def _dispatch(self) -> None:
        """Grant queued requests while slots are free, then tell holders over their share to give back.

        A free slot goes to the oldest request of an owner below its fair share, else to the
        oldest request overall. Owners may hand a released slot to their own next call
        without asking (no round trip) only while they hold no more than their share, so
        a newcomer below its share is served by the next slot anyone gives back.
        """
        share = self.share()
        while self.queue and self.calls_used < self.config.max_calls:
            rid, owner = self._next_request(share)
            del self.queue[rid]
            self.queued_by_owner[owner] -= 1
            o = self.owners.get(owner)
            if o is None:
                continue
            o.calls += 1
            self.calls_used += 1
            self.granted_total += 1
            o.granted.append(rid)
            if owner != self._replying_to:  # the reply being built carries it: no need to end its poll
                self.wake(owner)
        if self.queue:
            share, starving = self.share(), self.starving()
            for o in self.owners.values():
                if o.calls and self._must_hear(o, share, starving):
                    self.wake(o.owner)

    def _next_request(self, share: int) -> tuple[str, str]:
        for rid, owner in self.queue.items():
            o = self.owners.get(owner)
            if o is None or o.calls < share:
                return rid, owner
        return next(iter(self.queue.items()))

    def share(self, extra_owner: str | None = None) -> int:
        """The fair share of the call cap: ``max_calls`` split evenly among owners that hold or want calls.

        Rounded down: the remainder is handed out strictly in request order, so a share of 0
        (more owners than slots) means pure FIFO with no local reuse at all.
        """
        active = sum(1 for o in self.owners.values() if o.calls or self.queued_by_owner.get(o.owner, 0) > 0)
        if extra_owner is not None:
            o = self.owners.get(extra_owner)
            if o is None or not (o.calls or self.queued_by_owner.get(extra_owner, 0) > 0):
                active += 1
        return self.config.max_calls // max(1, active)

    def starving(self, share: int | None = None) -> bool:
        """Whether an owner holding less than the fair share is waiting."""
        share = self.share() if share is None else share
        for owner, queued in self.queued_by_owner.items():
            o = self.owners.get(owner)
            if queued > 0 and o is not None and o.calls < share:
                return True
        return False

    def keep_limit(self, owner: str, share: int | None = None, starving: bool | None = None) -> int:
        """How many slots ``owner`` may hold and reuse for its own calls without giving them back.

        All of them while nobody else waits. Otherwise its fair share, plus one of the
        remainder slots while no owner below its share waits (so remainder slots stay put
        instead of bouncing through the actor); with more owners than slots, none: every
        released slot goes back and is granted in request order.
        """
        if not self.contended_for(owner):
            return self.config.max_calls
        share = self.share(owner) if share is None else share
        if share < 1:
            return 0
        starving = self.starving(share) if starving is None else starving
        return share if starving else share + 1

    def _must_hear(self, o: OwnerState, share: int, starving: bool) -> bool:
        """Whether ``o`` may be keeping slots for its own reuse that it must now give back."""
        contended = self.contended_for(o.owner)
        if contended and not o.told_contended:
            return True
        keep = self.keep_limit(o.owner, share, starving)
        return o.calls > keep and o.told_keep > keep

    def contended_for(self, owner: str) -> bool:
        """Whether another owner is waiting for a call slot."""
        return len(self.queue) - self.queued_by_owner.get(owner, 0) > 0

    # ------------------------------------------------------------------ sandboxes

    def try_sandbox(self, owner: str, holdings: tuple[int, int] | None = None) -> bool:
        """Take a sandbox slot if one is free; otherwise ask the biggest holder to close an idle one."""
        if self.gone(owner):
            return False
        o = self.touch(owner, holdings)
        cap = self.config.max_sandboxes
        if cap is None or (self.sandboxes_used < cap and not self.sandbox_waiters):
            o.sandboxes += 1
            self.sandboxes_used += 1
            return True
        if owner in self.sandbox_waiters:
            return False  # still waiting: the pool re-asks on every local change, that is not a new need
        self.sandbox_waiters[owner] = 1
        holders = [h for h in self.owners.values() if h.owner != owner and h.sandboxes > 0]
        if holders:
            # Most likely to have an idle one: the most sandboxes beyond its calls in flight.
            best = max(holders, key=lambda h: (h.sandboxes - h.calls - h.reclaim, h.sandboxes))
            best.reclaim += 1
            self.wake(best.owner)
        return False

    def _grant_sandboxes(self) -> None:
        """Hand free sandbox slots to refused owners, oldest refusal first (delivered in their next reply)."""
        cap = self.config.max_sandboxes
        while self.sandbox_waiters and (cap is None or self.sandboxes_used < cap):
            owner, wanted = next(iter(self.sandbox_waiters.items()))
            if wanted <= 1:
                del self.sandbox_waiters[owner]
            else:
                self.sandbox_waiters[owner] = wanted - 1
            o = self.owners.get(owner)
            if o is None:
                continue
            o.sandboxes += 1
            o.sandbox_grants += 1
            self.sandboxes_used += 1
            self.wake(owner)

    # ------------------------------------------------------------------ creation bucket

    def creation_delay(self) -> float:
        """Reserve the next creation token and return how long the caller must wait for it.

        A generic cell-rate algorithm: tokens are handed out in arrival order, each one
        ``1/rate`` after the previous, with ``burst`` of them available at once.
        """
        rate = self.config.creation_rate
        if rate is None:
            return 0.0
        now = self.clock()
        interval = 1.0 / rate
        tolerance = (self.config.burst - 1) * interval
        tat = max(self._tat, now)
        delay = max(0.0, tat - tolerance - now)
        self._tat = tat + interval
        return delay

    def penalize(self, seconds: float) -> None:
        """The service said 429: no creation anywhere in the cluster for ``seconds``."""
        rate = self.config.creation_rate
        if rate is None or seconds <= 0:
            return
        tolerance = (self.config.burst - 1) / rate
        self._tat = max(self._tat, self.clock() + seconds + tolerance)

    # ------------------------------------------------------------------ replies, expiry

    def reply(self, owner: str) -> dict[str, Any]:
        """What ``owner`` must be told now; delivering it clears it."""
        o = self.owners.get(owner)
        if o is None:
            return {
                "granted": [],
                "contended": True,
                "keep": 0,
                "reclaim": 0,
                "sandbox_grants": 0,
                "sandbox_wanted": True,
                "need_ref": False,
            }
        granted, o.granted = o.granted, []
        reclaim, o.reclaim = o.reclaim, 0
        sandbox_grants, o.sandbox_grants = o.sandbox_grants, 0
        o.told_contended = self.contended_for(owner)
        o.told_keep = self.keep_limit(owner)
        return {
            "granted": granted,
            "contended": o.told_contended,
            "keep": o.told_keep,
            "reclaim": reclaim,
            "sandbox_grants": sandbox_grants,
            "sandbox_wanted": bool(self.sandbox_waiters),
            "need_ref": o.alive_ref is None or o.ref_probed,
        }

    def has_news(self, owner: str) -> bool:
        """Whether a long poll of ``owner`` should return now."""
        o = self.owners.get(owner)
        if o is None:
            return True
        if o.granted or o.reclaim or o.sandbox_grants or o.ref_probed:
            return True
        share = self.share(owner)
        return bool(o.calls) and self._must_hear(o, share, self.starving(share))

    def silent_owners(self, silence_s: float) -> list[OwnerState]:
        """Owners holding something that have not been heard from for ``silence_s``."""
        cutoff = self.clock() - silence_s
        return [
            o
            for o in self.owners.values()
            if o.last_seen < cutoff and (self._busy(o) or self.queued_by_owner.get(o.owner, 0) > 0)
        ]

    def expire(self) -> list[OwnerState]:
        """Return the leases of owners silent for longer than the TTL, and forget idle ones."""
        cutoff = self.clock() - self.config.lease_ttl_s
        gone = [o for o in self.owners.values() if o.last_seen < cutoff]
        busy = [o.owner for o in gone if self._busy(o) or self.queued_by_owner.get(o.owner, 0) > 0]
        removed = [self.remove(o.owner) for o in gone]
        busy_states = [r for r in removed if r is not None and r.owner in busy]
        self.reaped_total += len(busy_states)
        return busy_states

    def statistics(self) -> dict[str, Any]:
        """A snapshot for monitoring: usage, queue length and per-owner holdings."""
        return {
            "config": self.config.as_dict(),
            "calls_in_flight": self.calls_used,
            "calls_waiting": len(self.queue),
            "sandboxes_open": self.sandboxes_used,
            "granted_total": self.granted_total,
            "owners": {
                o.owner: {
                    "calls": o.calls,
                    "sandboxes": o.sandboxes,
                    "queued": self.queued_by_owner.get(o.owner, 0),
                    "info": o.info,
                }
                for o in self.owners.values()
            },
        }
