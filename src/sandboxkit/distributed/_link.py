"""The link between one process and the limiter actor: connection, batched messages, the long poll.

Split from :mod:`sandboxkit.distributed._client` along its seam: this half knows how to reach
the actor and keep talking to it (connect and reconnect, one ``post`` per event-loop turn,
one outstanding ``poll`` that doubles as the heartbeat); the :class:`RayLimiter` half keeps the
books (call slots, the lease cache, sandbox slots) and decides what to send. The limiter
implements the four hooks at the bottom.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Coroutine
from typing import Any

from sandboxkit.distributed._core import LimiterConfig
from sandboxkit.distributed._wire import Outbox, encode_poll, encode_post
from sandboxkit.errors import BackendUnavailable, PoolClosed

__all__ = ["MAX_ACTOR_CONCURRENCY", "ActorLink"]

log = logging.getLogger("sandboxkit.distributed")

MAX_ACTOR_CONCURRENCY = 10_000  # one long poll per client process is parked in the actor at a time


class ActorLink:
    """Connection and message plumbing to one limiter actor (the base of ``RayLimiter``).

    Args:
        config: the limits this process asks for.
        name: the actor's name.
        namespace: the actor's Ray namespace.
        idle_exit_s: the actor exits after this long without any user.
        label: a name for this process in the actor's statistics and logs.
        owner: this process's id at the actor.
    """

    def __init__(
        self, config: LimiterConfig, *, name: str, namespace: str, idle_exit_s: float, label: str, owner: str
    ) -> None:
        self.config = config
        self.cluster_config = config
        self.name = name
        self.namespace = namespace
        self.idle_exit_s = idle_exit_s
        self.label = label
        self.owner = owner
        self._actor: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._need_ref = False
        self._out = Outbox()
        self._inflight = (0, 0)  # releases sent but not yet acknowledged
        self._flush_scheduled = False
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._warned_config = False

    # ------------------------------------------------------------------ connection

    async def _ensure_connected(self) -> Any:
        if self._closed:
            raise PoolClosed(f"the Ray limiter {self.name!r} is closed")
        if self._actor is not None:
            return self._actor
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._connecting is None or self._connecting.done():
            self._connecting = self._loop.create_task(self._connect())
        connecting = self._connecting
        try:
            await asyncio.shield(connecting)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise BackendUnavailable(
                f"cannot reach or create the Ray limiter actor {self.name!r} in namespace {self.namespace!r}: {exc}; "
                "check that ray.init() connected to the cluster"
            ) from exc
        return self._actor

    def _get_or_create_actor(self) -> Any:
        import ray

        from sandboxkit.distributed._actor import LimiterActor

        actor_class = ray.remote(LimiterActor)
        return actor_class.options(  # type: ignore[attr-defined]
            name=self.name,
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=MAX_ACTOR_CONCURRENCY,
            # Not restarted by Ray: if it dies (its node is lost), the next process to reach for it
            # creates a new one and every process re-declares what it holds (see _connect).
            max_restarts=0,
        ).remote(self.config.as_dict(), self.idle_exit_s)

    async def _connect(self) -> None:
        delay = 0.05
        while True:
            actor = await asyncio.to_thread(self._get_or_create_actor)
            try:
                result = await actor.register.remote(
                    self.owner, self._info(), self.config.as_dict(), self._holdings(), self._fresh_ref()
                )
                break
            except Exception as exc:  # the actor exited (idle) or is restarting: look it up again
                if self._closed:
                    raise
                log.info("limiter %s not ready (%s); retrying in %.2fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.cluster_config = LimiterConfig(**result["config"])
        if self.cluster_config != self.config and not self._warned_config:
            self._warned_config = True
            log.warning(
                "the Ray limiter %r is already running with %s while this pool asked for %s; the running "
                "limits apply (they change once no process uses the limiter, or use another limiter name)",
                self.name,
                self.cluster_config,
                self.config,
            )
        self._actor = actor
        self._on_connected()
        self._handle_reply(result["reply"])
        self._schedule_flush()
        self._ensure_poller()

    def _on_actor_error(self, exc: BaseException) -> None:
        if self._closed or self._actor is None:
            return
        log.warning("lost the Ray limiter %s (%s: %s); reconnecting", self.name, type(exc).__name__, exc)
        self._actor = None
        self._on_disconnected()
        assert self._loop is not None
        self._connecting = self._loop.create_task(self._connect())

    def _info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node": ctx.get_node_id()[:12],
            "actor": ctx.get_actor_id() or "",
            "job": ctx.get_job_id(),
            "label": self.label,
        }

    def _fresh_ref(self) -> list[Any]:
        """An object this process owns: the actor's fetch of it fails once this process is dead."""
        import ray

        self._need_ref = False
        return [ray.put(self.owner)]

    @staticmethod
    async def _await_ref(ref: Any) -> Any:
        return await ref

    # ------------------------------------------------------------------ messages

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None and self._out:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._actor is None or not self._out or self._closed:
            return  # sent after the (re)connect
        self._spawn(self._send(self._out.take()))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        task: asyncio.Task[None] = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, msg: Outbox) -> None:
        actor = self._actor
        self._inflight = (self._inflight[0] + msg.releases, self._inflight[1] + msg.sandbox_releases)
        # Holdings *before* this message's releases: if the actor has to adopt us, it then applies them.
        holdings = self._holdings()
        try:
            reply = await actor.post.remote(
                encode_post(self.owner, msg.requests, msg.cancels, msg.releases, msg.sandbox_releases, holdings)
            )
        except Exception as exc:
            self._out.merge(msg)
            self._on_actor_error(exc)
            return
        finally:
            self._inflight = (self._inflight[0] - msg.releases, self._inflight[1] - msg.sandbox_releases)
        self._handle_reply(reply)

    def _ensure_poller(self) -> None:
        if self._poller is None and not self._closed and self._loop is not None and self._needs_poll():
            self._poller = self._loop.create_task(self._poll_forever())

    async def _poll_forever(self) -> None:
        try:
            while not self._closed and self._needs_poll():
                actor = self._actor
                if actor is None:
                    await asyncio.sleep(0.05)  # reconnecting
                    continue
                alive = self._fresh_ref() if self._need_ref else []
                try:
                    heartbeat = self.cluster_config.heartbeat_s
                    reply = await actor.poll.remote(encode_poll(self.owner, self._holdings(), heartbeat), alive)
                except Exception as exc:
                    self._on_actor_error(exc)
                    continue
                self._handle_reply(reply)
        finally:
            self._poller = None

    # ------------------------------------------------------------------ hooks (the limiter's books)

    def _holdings(self) -> tuple[int, int]:
        """(call slots, sandbox slots) the actor should count for this process."""
        raise NotImplementedError

    def _needs_poll(self) -> bool:
        """Whether this process holds or waits for anything (then a poll must be outstanding)."""
        raise NotImplementedError

    def _handle_reply(self, reply: dict[str, Any]) -> None:
        """Apply the actor's answer (grants, recalls, contention) to the books."""
        raise NotImplementedError

    def _on_connected(self) -> None:
        """The actor was (re)connected: re-queue what it may have forgotten."""

    def _on_disconnected(self) -> None:
        """The actor was lost: stop local hand-offs until it answers again."""
