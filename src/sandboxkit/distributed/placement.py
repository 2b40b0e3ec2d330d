"""``RayPlacedBackend``: run each sandbox on whichever node of a Ray cluster has free CPUs.

A local backend (``subprocess``, ``docker``) grades code on the machine that asked. On a
cluster that leaves every other node idle while one is saturated. Here each sandbox is
hosted by a small Ray actor that reserves ``num_cpus`` while the sandbox is open; Ray's
scheduler puts the actor on a node with that many CPUs free (or queues it until one has),
the actor opens the inner backend's sandbox there, and every ``run`` / ``exec`` / file call
is forwarded to it. Closing the sandbox kills the actor, which frees its CPUs.

Usage::

    backend = RayPlacedBackend("docker", {"image": "sandboxkit-base:latest"}, num_cpus=1)
    async with SandboxPool(backend, max_concurrency=256, limiter="ray") as pool:
        ...

The host actors are owned by the process that opened them, so they die with it; a
backend whose sandboxes outlive their process (Docker) still needs ``sandboxkit cleanup``
on each node after a crash.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sandboxkit.base import Backend, Capabilities, Sandbox
from sandboxkit.errors import BackendUnavailable, SandboxCrashed, SandboxkitError, Transient
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult
from sandboxkit.streaming import BufferedSandbox

__all__ = ["RayPlacedBackend", "SandboxHost"]

log = logging.getLogger("sandboxkit.distributed")

InnerBackend = str | type[Backend] | Callable[..., Backend]


def make_inner(inner: InnerBackend, options: Mapping[str, Any]) -> Backend:
    """Build the inner backend: a registered name, a ``"module:Class"`` string, or a class/factory."""
    if callable(inner):
        return inner(**options)
    if ":" in inner:
        module_name, _, attr = inner.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        backend: Backend = factory(**options)
        return backend
    from sandboxkit.registry import backend as by_name

    return by_name(inner, **options)


class SandboxHost:
    """Ray actor hosting one sandbox of the inner backend (runs on the node Ray picked)."""

    def __init__(self, inner: InnerBackend, options: dict[str, Any]) -> None:
        self.backend = make_inner(inner, options)
        self.sandbox: Sandbox | None = None

    async def open(self, limits: Limits | None) -> dict[str, Any]:
        import ray

        self.sandbox = await self.backend.open(limits)
        return {"id": self.sandbox.id, "node": ray.get_runtime_context().get_node_id()}

    def _sb(self) -> Sandbox:
        if self.sandbox is None:
            raise SandboxCrashed("the hosted sandbox is not open", backend="ray")
        return self.sandbox

    async def run(self, request: RunRequest) -> RunResult:
        return await self._sb().run(request)

    async def exec(self, request: ExecRequest) -> ExecResult:
        # Through ``exec``, not ``exec_request``: the inner backend may be a plugin that implements only ``exec``.
        return await self._sb().exec(request.command, **request.exec_keywords())

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        await self._sb().write_files(files)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return await self._sb().read_files(paths)

    async def alive(self) -> bool:
        return self.sandbox is not None and await self.sandbox.alive()

    async def reset(self) -> bool:
        return self.sandbox is not None and await self.sandbox.reset()

    async def close(self) -> None:
        try:
            if self.sandbox is not None:
                await self.sandbox.close()
        finally:
            self.sandbox = None
            await self.backend.aclose()


async def _call(ref: Any, backend: str, sandbox_id: str | None) -> Any:
    """Await a host call, translating Ray's errors into sandboxkit's."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

    try:
        return await ref
    except RayTaskError as exc:
        cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else None
        if isinstance(cause, SandboxkitError):
            raise cause from None
        raise SandboxCrashed(f"the sandbox host raised {exc}", backend=backend, sandbox_id=sandbox_id) from exc
    except ActorUnavailableError as exc:
        raise Transient(
            f"the sandbox host is unreachable for now ({exc})", backend=backend, sandbox_id=sandbox_id
        ) from exc
    except (ActorDiedError, RayActorError) as exc:
        raise SandboxCrashed(
            f"the sandbox host actor died (node lost or process killed): {exc}", backend=backend, sandbox_id=sandbox_id
        ) from exc


class RaySandbox(BufferedSandbox):
    """A sandbox living in a :class:`SandboxHost` actor somewhere in the cluster."""

    def __init__(self, owner: RayPlacedBackend, host: Any, inner_id: str, node: str) -> None:
        self._owner = owner
        self._host = host
        self.id = f"{node[:8]}/{inner_id}"
        self.node_id = node
        self.backend_name = owner.name
        self._closed = False

    async def _run_buffered(self, request: RunRequest) -> RunResult:
        result: RunResult = await _call(self._host.run.remote(request), self.backend_name, self.id)
        return result

    async def _exec_buffered(self, request: ExecRequest) -> ExecResult:
        result: ExecResult = await _call(self._host.exec.remote(request), self.backend_name, self.id)
        return result

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        await _call(self._host.write_files.remote(dict(files)), self.backend_name, self.id)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        result: dict[str, bytes] = await _call(self._host.read_files.remote(list(paths)), self.backend_name, self.id)
        return result

    async def alive(self) -> bool:
        if self._closed:
            return False
        try:
            return bool(await asyncio.wait_for(_call(self._host.alive.remote(), self.backend_name, self.id), 30))
        except Exception:
            return False

    async def reset(self) -> bool:
        try:
            return bool(await _call(self._host.reset.remote(), self.backend_name, self.id))
        except SandboxkitError:
            return False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(_call(self._host.close.remote(), self.backend_name, self.id), 30)
        except Exception:
            log.debug("closing hosted sandbox %s failed; killing its host", self.id, exc_info=True)
        finally:
            self._owner._kill(self._host)


class RayPlacedBackend(Backend):
    """Run the ``inner`` backend's sandboxes on Ray actors placed where CPUs are free.

    Args:
        inner: the backend to host: a registered name (``"subprocess"``, ``"docker"``), a
            ``"module:Class"`` string, or a backend class importable on every node.
        inner_options: options of the inner backend (as for ``sandboxkit.backend(name, **options)``).
        num_cpus: CPUs each open sandbox reserves (Ray places the host where they are free).
        memory_mb: memory each sandbox reserves in Ray's accounting (``None``: none).
        resources: extra custom Ray resources per sandbox (e.g. ``{"grader": 1}`` to pin to tagged nodes).
        scheduling_strategy: Ray's scheduling strategy for the hosts (``"DEFAULT"`` packs then
            spreads as nodes fill, ``"SPREAD"`` spreads from the start).
        runtime_env: Ray runtime environment of the host actors.

    Raises:
        BackendUnavailable: Ray is not installed or not initialised.
    """

    name = "ray"

    def __init__(
        self,
        inner: InnerBackend = "subprocess",
        inner_options: Mapping[str, Any] | None = None,
        *,
        num_cpus: float = 1.0,
        memory_mb: int | None = None,
        resources: Mapping[str, float] | None = None,
        scheduling_strategy: str = "DEFAULT",
        runtime_env: Mapping[str, Any] | None = None,
    ) -> None:
        self.inner = inner
        self.inner_options = dict(inner_options or {})
        self.num_cpus = num_cpus
        self.memory_mb = memory_mb
        self.resources = dict(resources or {})
        self.scheduling_strategy = scheduling_strategy
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self._capabilities: Capabilities | None = None
        self._hosts: set[Any] = set()
        self._host_class: Any = None

    @classmethod
    def availability(cls, **options: object) -> Any:
        from sandboxkit.base import Availability
        from sandboxkit.distributed._ray import ray_ready

        ready, why = ray_ready()
        return Availability(ready, why)

    @property
    def capabilities(self) -> Capabilities:
        """The inner backend's capabilities (as seen from this node)."""
        if self._capabilities is None:
            probe = make_inner(self.inner, self.inner_options)
            self._capabilities = probe.capabilities
        return self._capabilities

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "scheduling_strategy": self.scheduling_strategy,
            "max_restarts": 0,
        }
        if self.memory_mb:
            opts["memory"] = self.memory_mb * 1024 * 1024
        if self.resources:
            opts["resources"] = self.resources
        if self.runtime_env:
            opts["runtime_env"] = self.runtime_env
        return opts

    async def open(self, limits: Limits | None = None) -> RaySandbox:
        """Start a host actor (Ray places it) and open the inner sandbox there.

        Waits while no node has ``num_cpus`` free: that is the cluster's queue.

        Raises:
            BackendUnavailable: Ray is not initialised, or the inner backend cannot work on that node.
            Transient, RateLimited: from the inner backend.
        """
        import ray

        if not ray.is_initialized():
            raise BackendUnavailable("RayPlacedBackend needs ray.init() in this process first", backend=self.name)
        if self._host_class is None:
            self._host_class = ray.remote(SandboxHost)
        host = self._host_class.options(**self._options()).remote(self.inner, self.inner_options)
        self._hosts.add(host)
        try:
            opened = await _call(host.open.remote(limits), self.name, None)
        except BaseException:
            self._kill(host)  # also on cancellation: a queued host must not start later and hold CPUs
            raise
        return RaySandbox(self, host, str(opened["id"]), str(opened["node"]))

    def _kill(self, host: Any) -> None:
        import ray

        self._hosts.discard(host)
        try:
            ray.kill(host, no_restart=True)
        except Exception:
            log.debug("killing a sandbox host failed", exc_info=True)

    async def aclose(self) -> None:
        """Kill every host this backend still has (their sandboxes close with them)."""
        for host in list(self._hosts):
            self._kill(host)

    async def cleanup(self) -> int:
        """Kill this backend's hosts; returns how many. Other processes' hosts die with their owners."""
        n = len(self._hosts)
        await self.aclose()
        return n

    def emergency_cleanup(self) -> None:
        """At exit: kill the hosts (their inner sandboxes go with them)."""
        try:
            import ray

            if not ray.is_initialized():
                return
        except ImportError:
            return
        for host in list(self._hosts):
            self._kill(host)
