"""The service's effective concurrency, learned from its refusals (additive increase, multiplicative decrease).

A cloud account has a limit the pool cannot read in advance: Daytona's organisation vCPU
quota, E2B's concurrent-sandbox cap. When the service refuses a creation with
:class:`~sandboxkit.errors.CapacityExceeded`, retrying sooner does not help; only closing one
of our own sandboxes does. So the pool treats the refusal as information: its sandbox cap
drops to what it holds at that moment (never below 1), calls queue behind that cap, and
every successful call made while others wait for a sandbox nudges the cap back up by
``1/cap`` (one more sandbox per round of ``cap`` successes, as TCP grows its window), bounded
by ``max_sandboxes``. Without waiters the cap stays put: growing it would only be a guess
nobody tests. When the account's
limit is raised, the cap climbs back without a restart; when it is lowered again, the next
refusal brings it down.
"""

from __future__ import annotations

import math

__all__ = ["LearnedCapacity"]


class LearnedCapacity:
    """An AIMD estimate of how many sandboxes the service lets this pool hold at once.

    Args:
        ceiling: the pool's own ``max_sandboxes``; the learned cap never exceeds it.
    """

    __slots__ = ("_value", "cap", "ceiling", "refusals")

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self._value = float(ceiling)
        #: Sandboxes the pool may hold now (an integer, at least 1). An attribute, not a property:
        #: the pool reads it on every give-back.
        self.cap = ceiling
        self.refusals = 0

    def refused(self, held: int) -> None:
        """The service refused one more sandbox while the pool held (or was opening) ``held``."""
        self.refusals += 1
        self._value = max(1.0, min(self._value, float(held)))
        self.cap = max(1, math.floor(self._value))

    def succeeded(self) -> None:
        """A call finished on a sandbox the service let us have: grow by one per ``cap`` successes."""
        if self._value < self.ceiling:
            self._value = min(float(self.ceiling), self._value + 1.0 / max(1.0, self._value))
            self.cap = max(1, math.floor(self._value))

    def __repr__(self) -> str:
        return f"LearnedCapacity(cap={self.cap}, ceiling={self.ceiling}, refusals={self.refusals})"
