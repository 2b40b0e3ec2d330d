"""What a client process and the limiter actor send each other.

Two messages carry nearly all the traffic: ``post`` (releases, cancels and new call
requests, batched per event-loop turn) and ``poll`` (the long poll that is also the
heartbeat). Both travel as one bytes argument; replies are plain dicts built by
:meth:`~sandboxkit.distributed._core.LimiterCore.reply`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Outbox", "decode_poll", "decode_post", "encode_poll", "encode_post"]


def encode_post(
    owner: str, requests: list[str], cancels: list[str], releases: int, sandbox_releases: int, holdings: tuple[int, int]
) -> bytes:
    """One ``post`` message as a single bytes argument.

    Ray serializes every argument of an actor call separately; one bytes argument instead
    of six makes the round trip about a quarter of a millisecond shorter (measured on
    Ray 2.60), and this message is on the path of every call that is not served locally.
    """
    return json.dumps([owner, requests, cancels, releases, sandbox_releases, list(holdings)]).encode()


def decode_post(message: bytes) -> tuple[str, list[str], list[str], int, int, tuple[int, int]]:
    owner, requests, cancels, releases, sandbox_releases, holdings = json.loads(message)
    return owner, requests, cancels, int(releases), int(sandbox_releases), (int(holdings[0]), int(holdings[1]))


def encode_poll(owner: str, holdings: tuple[int, int], timeout: float) -> bytes:
    """One ``poll`` message as a single bytes argument (see :func:`encode_post`)."""
    return json.dumps([owner, list(holdings), timeout]).encode()


def decode_poll(message: bytes) -> tuple[str, tuple[int, int], float]:
    owner, holdings, timeout = json.loads(message)
    return owner, (int(holdings[0]), int(holdings[1])), float(timeout)


@dataclass
class Outbox:
    """What a client has to tell the actor at its next ``post``."""

    requests: list[str] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    releases: int = 0
    sandbox_releases: int = 0

    def __bool__(self) -> bool:
        return bool(self.requests or self.cancels or self.releases or self.sandbox_releases)

    def take(self) -> Outbox:
        out = Outbox(self.requests, self.cancels, self.releases, self.sandbox_releases)
        self.requests, self.cancels, self.releases, self.sandbox_releases = [], [], 0, 0
        return out

    def merge(self, other: Outbox) -> None:
        self.requests[:0] = other.requests
        self.cancels[:0] = other.cancels
        self.releases += other.releases
        self.sandbox_releases += other.sandbox_releases
