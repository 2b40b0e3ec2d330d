"""The limiter actor: :class:`~sandboxkit.distributed._core.LimiterCore` behind Ray calls.

One named, detached async actor per limiter name. It is detached on purpose: a
non-detached actor shares the fate of the process that created it, and the first pool to
ask for the limiter is usually just one of the workers (a verl ``RewardLoopWorker``). If
that worker crashed, the whole cluster would lose its caps with it, which is the
fragility that got verl's named semaphore actor removed. The actor instead exits by
itself once nobody has used it for ``idle_exit_s``, so it does not outlive the job for
long, and ``shutdown_limiter`` removes it at once.

The actor never blocks its event loop: waits are long polls on ``asyncio.Event`` s, and
owner liveness is probed with awaited object fetches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sandboxkit.distributed._core import LimiterConfig, LimiterCore
from sandboxkit.distributed._wire import decode_poll, decode_post

__all__ = ["LimiterActor"]

log = logging.getLogger("sandboxkit.distributed")

PROBE_TIMEOUT_S = 5.0


class LimiterActor:
    """Ray async actor holding a cluster's caps. Created only through ``sandboxkit.distributed``.

    Args:
        config: :class:`LimiterConfig` fields.
        idle_exit_s: exit after this long with no owner at all.
    """

    def __init__(self, config: dict[str, Any], idle_exit_s: float = 600.0) -> None:
        self.core = LimiterCore(LimiterConfig(**config), wake=self._wake)
        self.idle_exit_s = idle_exit_s
        self._events: dict[str, asyncio.Event] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._probing: set[str] = set()
        self._idle_since = time.monotonic()
        self.reaped_dead = 0

    # ------------------------------------------------------------------ plumbing

    def _wake(self, owner: str) -> None:
        event = self._events.get(owner)
        if event is not None:
            event.set()

    def _start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    # ------------------------------------------------------------------ methods called by owners

    async def register(
        self, owner: str, info: dict[str, Any], config: dict[str, Any], holdings: tuple[int, int], alive: list[Any]
    ) -> dict[str, Any]:
        """Join (or rejoin, after a reconnect) with what the owner holds; returns the limits in force."""
        self._start()
        in_force = self.core.configure(LimiterConfig(**config))
        known = owner in self.core.owners
        self.core.departed.pop(owner, None)  # an explicit (re)join always counts
        self.core.touch(owner, holdings, info)
        if alive:
            self.core.set_alive_ref(owner, alive[0])
        return {"config": in_force.as_dict(), "known": known, "reply": self.core.reply(owner)}

    async def post(self, message: bytes) -> dict[str, Any]:
        """A batched message (see :func:`encode_post`): releases, cancels, new call requests.

        Returns the owner's news, usually the grants its requests got at once.
        """
        self._start()
        owner, requests, cancels, releases, sandbox_releases, holdings = decode_post(message)
        return self.core.post(
            owner,
            requests=requests,
            cancels=cancels,
            releases=releases,
            sandbox_releases=sandbox_releases,
            holdings=holdings,
        )

    async def poll(self, message: bytes, alive: list[Any]) -> dict[str, Any]:
        """Long poll (see :func:`encode_poll`): return as soon as the owner has news, or after its timeout.

        News is a grant, a request to give slots back or close an idle sandbox, a sandbox slot.
        Each poll is also the owner's heartbeat; ``alive`` may carry a fresh liveness object.
        """
        self._start()
        owner, holdings, timeout = decode_poll(message)
        if self.core.gone(owner):
            return self.core.reply(owner)
        self.core.touch(owner, holdings)
        if alive:
            self.core.set_alive_ref(owner, alive[0])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = self._events.setdefault(owner, asyncio.Event())
        # A wake-up can be stale (the news went out in a ``post`` reply meanwhile): keep waiting then.
        while not self.core.has_news(owner):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                break
        return self.core.reply(owner)

    async def try_sandbox(self, owner: str, holdings: tuple[int, int]) -> bool:
        """Take a sandbox slot if one is free (never waits)."""
        self._start()
        return self.core.try_sandbox(owner, holdings)

    async def creation_delay(self, owner: str) -> float:
        """Reserve a creation token; returns the seconds to wait before using it."""
        self._start()
        if not self.core.gone(owner):
            self.core.touch(owner)
        return self.core.creation_delay()

    async def penalize(self, seconds: float) -> None:
        """Pause creations cluster-wide (a 429 was seen)."""
        self.core.penalize(seconds)

    async def unregister(self, owner: str) -> None:
        """Leave: everything the owner held is returned."""
        self.core.remove(owner, final=True)
        self._events.pop(owner, None)

    async def statistics(self) -> dict[str, Any]:
        """Usage, queue and per-owner holdings, plus how many leases were reclaimed."""
        stats = self.core.statistics()
        stats.update(reaped_expired=self.core.reaped_total, reaped_dead=self.reaped_dead)
        return stats

    # ------------------------------------------------------------------ lease expiry and liveness

    async def _reap_forever(self) -> None:
        while True:
            heartbeat = self.core.config.heartbeat_s
            await asyncio.sleep(min(1.0, heartbeat / 2))
            try:
                self._reap_once(heartbeat)
            except Exception:  # a bug here must not stop reaping for good
                log.exception("sandboxkit limiter: reaping failed")

    def _reap_once(self, heartbeat: float) -> None:
        for o in self.core.silent_owners(2 * heartbeat):
            if o.alive_ref is not None and not o.ref_probed and o.owner not in self._probing:
                self._probing.add(o.owner)
                asyncio.get_running_loop().create_task(self._probe(o.owner, o.alive_ref))
        for o in self.core.expire():
            log.warning(
                "sandboxkit limiter: owner %s (%s) silent for %.1fs; returned its %d call and %d sandbox leases",
                o.owner,
                _describe(o.info),
                self.core.config.lease_ttl_s,
                o.calls,
                o.sandboxes,
            )
        for owner in [w for w in self._events if w not in self.core.owners]:
            del self._events[owner]
        now = time.monotonic()
        if self.core.owners:
            self._idle_since = now
        elif now - self._idle_since > self.idle_exit_s:
            import ray

            log.info("sandboxkit limiter: unused for %.0fs, exiting", self.idle_exit_s)
            # A kill, not exit_actor(): a graceful exit would first wait for parked long polls.
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    async def _probe(self, owner: str, ref: Any) -> None:
        """Fetch an object the owner put: Ray fails the fetch once the owner's process is gone."""
        from ray.exceptions import ObjectLostError

        try:
            await asyncio.wait_for(ref, PROBE_TIMEOUT_S)
        except ObjectLostError:  # OwnerDiedError included: the process is gone, its leases with it
            state = self.core.remove(owner, final=True)
            self._events.pop(owner, None)
            if state is not None:
                self.reaped_dead += 1
                log.warning(
                    "sandboxkit limiter: owner %s (%s) died; returned its %d call and %d sandbox leases",
                    owner,
                    _describe(state.info),
                    state.calls,
                    state.sandboxes,
                )
        except asyncio.TimeoutError:
            pass  # unknown: the TTL decides
        except Exception:
            log.debug("sandboxkit limiter: probing %s failed", owner, exc_info=True)
        else:
            o = self.core.owners.get(owner)
            if o is not None and o.alive_ref is ref:
                o.ref_probed = True  # alive; the fetched value is cached now, so ask for a fresh object
                self._wake(owner)
        finally:
            self._probing.discard(owner)


def _describe(info: dict[str, Any]) -> str:
    parts = [f"{k}={info[k]}" for k in ("node", "pid", "actor", "label") if info.get(k)]
    return " ".join(parts) or "unknown process"
