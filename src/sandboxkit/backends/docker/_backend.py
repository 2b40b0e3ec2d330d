"""``DockerBackend``: hardened local containers with a warm runner inside each.

Options: :class:`~sandboxkit.configs.DockerConfig` declares each one (type, default, meaning);
docs/backends/docker.md shows them as a table rendered from it. The image needs the toolchains
of the languages you use (a missing one is a :class:`ToolchainMissing` error); the ``runner``
option picks how programs are started inside it (the Python runner, or a static Go binary
that needs nothing from the image).
"""

from __future__ import annotations

import logging
import os
import posixpath
import threading
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import anyio.to_thread

from sandboxkit._watchdog import Lease, lease_dir, ttl_for
from sandboxkit.backends.docker import _abspath, _engine
from sandboxkit.backends.docker._channel import ChannelClosed, RunnerChannel
from sandboxkit.backends.docker._checks import check_limits
from sandboxkit.backends.docker._fork import ArchiveSnapshot, check_snapshot, fill_new
from sandboxkit.backends.docker._owner import owner_alive, owner_labels
from sandboxkit.backends.docker._sandbox import DockerSandbox
from sandboxkit.backends.docker._static import StaticRunnerUnavailable, static_runner
from sandboxkit.base import Availability, Backend, Capabilities, Sandbox, Snapshot
from sandboxkit.configs import DockerConfig
from sandboxkit.errors import BackendUnavailable, InvalidRequest, Transient
from sandboxkit.languages import LANGUAGES
from sandboxkit.models import Limits, check_sandbox_path

__all__ = ["DEFAULT_IMAGE", "IMAGE_ENV", "LABELS_ENV", "RUNNERS", "RUNNER_ENV", "DockerBackend"]

log = logging.getLogger(__name__)

IMAGE_ENV = "SANDBOXKIT_DOCKER_IMAGE"
LABELS_ENV = "SANDBOXKIT_DOCKER_LABELS"
RUNNER_ENV = "SANDBOXKIT_DOCKER_RUNNER"
DEFAULT_IMAGE = "sandboxkit-base:latest"
_NAME = "docker"
#: ``runner`` option values: the Python runner first, the static one if the image cannot run it; or one of them only.
RUNNERS = ("auto", "static", "python")
_DOCS = "docs/backends/docker.md"
_SETUP = "scripts/docker-setup.sh"
_ENFORCED = frozenset(
    {"timeout_s", "compile_timeout_s", "memory_mb", "cpus", "pids", "output_bytes", "file_size_mb", "network"}
)


class _RunnerFailed(BackendUnavailable):
    """The image could not start this runner (``runner="auto"`` then tries the other one)."""


def _labels_from_env() -> dict[str, str]:
    """``SANDBOXKIT_DOCKER_LABELS="job=42,team=rl"`` -> extra labels for every container (and cleanup's scope)."""
    labels = {}
    for item in os.environ.get(LABELS_ENV, "").split(","):
        key, sep, value = item.strip().partition("=")
        if key:
            if not sep:
                raise InvalidRequest(
                    f"{LABELS_ENV} must look like 'key=value,key2=value2', got {item!r}", backend=_NAME
                )
            labels[key] = value
    return labels


def _engine_hint(base_url: str | None) -> str:
    where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return (
        f"no Docker engine answers at {where}; start it (`sudo systemctl start docker`, or `sudo dockerd &`) "
        f"and check `docker info`; see {_DOCS}"
    )


def _checked_dirs(dirs: Sequence[str], writable_root: bool) -> tuple[str, ...]:
    """``writable_dirs`` normalised, or InvalidRequest naming the bad entry."""
    if isinstance(dirs, str):
        raise InvalidRequest(f"writable_dirs must be a list of absolute paths, got the string {dirs!r}", backend=_NAME)
    out = []
    for directory in dirs:
        if not isinstance(directory, str) or not directory.startswith("/"):
            raise InvalidRequest(f"writable_dirs entries must be absolute paths, got {directory!r}", backend=_NAME)
        try:
            out.append(check_sandbox_path(directory, absolute_ok=True))
        except ValueError as exc:
            raise InvalidRequest(f"writable_dirs: {exc}", backend=_NAME) from exc
        _abspath.check_reachable(out[-1], None)
    if out and not writable_root:
        raise InvalidRequest(
            f"writable_dirs={out!r} needs writable_root=True (the container's root is read-only otherwise)",
            backend=_NAME,
        )
    return tuple(out)


class DockerBackend(Backend):
    """Sandboxes as hardened Docker containers, each with a warm runner (see the module docstring).

    Args:
        config: the options, a :class:`~sandboxkit.configs.DockerConfig`.
        **options: the same options as keywords (``DockerBackend(image="python:3.12")``), validated
            by that model, over ``config`` when both are given.

    Raises:
        InvalidRequest: an option is unknown or invalid, a ``writable_dirs`` entry cannot be made
            writable, or ``$SANDBOXKIT_DOCKER_RUNNER`` / ``$SANDBOXKIT_DOCKER_LABELS`` is malformed.
    """

    name = _NAME
    config_model: ClassVar[type[DockerConfig]] = DockerConfig

    def __init__(self, config: DockerConfig | None = None, **options: Any) -> None:
        self.config = config = DockerConfig.from_options(config, options)
        runner = config.runner or os.environ.get(RUNNER_ENV) or "auto"
        if runner not in RUNNERS:
            raise InvalidRequest(f"{RUNNER_ENV} must be one of {', '.join(RUNNERS)}, got {runner!r}", backend=_NAME)
        self.image = config.image or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE
        self.workdir = posixpath.normpath(config.workdir)
        self.workdir_size_mb = config.workdir_size_mb
        self.tmp_size_mb = config.tmp_size_mb
        self.network = config.network
        self.python_fast = config.python_fast
        self.base_url = config.base_url
        self.start_timeout_s = config.start_timeout_s
        self.grace_s = config.grace_s
        self.writable_root = config.writable_root
        self.writable_dirs = _checked_dirs(config.writable_dirs, self.writable_root)
        self.runner = runner
        self._static_path: str | None = None
        self._auto_static = False  # runner="auto" found that the image cannot run the Python runner
        self.instance_id = uuid.uuid4().hex[:12]
        self.extra_labels = dict(config.labels) if config.labels is not None else _labels_from_env()
        self.labels = {
            **self.extra_labels,
            _engine.LABEL: "1",
            f"{_engine.LABEL}.backend": _NAME,
            f"{_engine.LABEL}.instance": self.instance_id,
            **owner_labels(),  # pid, start time, boot, pid namespace, host: cleanup spares live owners
        }
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._created: dict[str, str] = {}  # container id -> its workspace volume
        #: Checkpoints taken and not yet released (each leaves it when released).
        self.checkpoints: set[ArchiveSnapshot] = set()
        self._caps = Capabilities(
            streaming=True,
            languages=frozenset(LANGUAGES),
            stateful=True,
            network_control=True,
            limits=_ENFORCED,
            resettable=not self.writable_root,
            absolute_paths=True,
            kernels=True,
            fork="files",
            fork_warm=True,
            suspend="files+memory",  # docker pause: the cgroup freezer on the whole container
            notes=(
                "fork: files only (a workspace archive unpacked into a warm idle container, or a new "
                "one; no CRIU on this engine, so processes and memory are not carried)",
                f"image {self.image}: languages whose toolchain it lacks raise ToolchainMissing",
                "network can only be chosen when a sandbox opens (Limits.network), not per run",
            ),
        )

    # ----------------------------------------------------------------- engine connection

    @property
    def capabilities(self) -> Capabilities:
        """Every language of the table (the image decides which toolchains exist), all limits."""
        return self._caps

    @property
    def client(self) -> Any:
        """The docker SDK client (created on first use, in a worker thread: it does I/O)."""
        with self._client_lock:
            if self._client is None:
                import docker

                kwargs: dict[str, Any] = {"timeout": 120, "max_pool_size": 64}
                self._client = (
                    docker.DockerClient(base_url=self.base_url, **kwargs)
                    if self.base_url
                    else docker.from_env(**kwargs)
                )
            return self._client

    async def _connect(self) -> Any:
        import docker.errors
        import requests.exceptions

        try:
            return await anyio.to_thread.run_sync(lambda: self.client)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise BackendUnavailable(f"{_engine_hint(self.base_url)} ({exc})", backend=_NAME) from exc

    # ----------------------------------------------------------------- sandboxes

    async def open(self, limits: Limits | None = None) -> Sandbox:
        """Create, attach and start one container and wait for its runner's hello.

        With ``runner="auto"`` the Python runner is tried first (its Python fast path is ~10x
        faster for Python code); if the image cannot run it (no ``python3``, or one without
        ``json``/``ctypes``), the static runner takes over, for this and every later sandbox.

        Raises:
            BackendUnavailable: no engine, the image is missing, or the image cannot run the runner.
            Transient: the engine failed or was too slow for now (the pool retries).
        """
        limits = limits or Limits()
        check_limits(limits)
        client = await self._connect()
        # the dead-man switch
        Lease.hold(_NAME, lease_dir(), self.owner_ttl_s or ttl_for(None, Limits()), f"{__name__}:remove_dead_owners")
        if self.runner == "static" or self._auto_static:
            return await self._open_once(client, limits, await self._static_binary())
        try:
            return await self._open_once(client, limits, None)
        except _RunnerFailed as exc:
            if self.runner != "auto":
                raise
            try:
                binary = await self._static_binary()
            except BackendUnavailable as why:
                raise BackendUnavailable(f"{exc}; the static runner cannot stand in: {why}", backend=_NAME) from exc
            sandbox = await self._open_once(client, limits, binary)
            log.info("image %s cannot run the Python runner; using the static runner", self.image)
            self._auto_static = True
            return sandbox

    async def _static_binary(self) -> str:
        """The static runner's path (built once per source version, in a worker thread)."""
        if self._static_path is None:
            try:
                path = await anyio.to_thread.run_sync(static_runner)
            except StaticRunnerUnavailable as exc:
                raise BackendUnavailable(f"runner='static' needs the static runner: {exc}", backend=_NAME) from exc
            self._static_path = str(path)
        return self._static_path

    async def _open_once(self, client: Any, limits: Limits, static: str | None) -> Sandbox:
        import docker.errors
        import requests.exceptions

        volume = f"sandboxkit-{self.instance_id}-{uuid.uuid4().hex[:10]}"
        spec = _engine.ContainerSpec(
            self.image,
            self.workdir,
            self.workdir_size_mb,
            self.tmp_size_mb,
            self.network,
            limits,
            volume,
            self.labels,
            writable_root=self.writable_root,
            runner=static,
        )
        needs = "the static runner" if static else "python3 >= 3.8 with its standard library"
        container_id: str | None = None
        channel: RunnerChannel | None = None
        try:
            container_id = await anyio.to_thread.run_sync(_engine.create_container, client, spec)
            self._created[container_id] = volume
            sock, owner = await anyio.to_thread.run_sync(_engine.attach, client, container_id)
            channel = RunnerChannel(sock, owner, container_id[:12])
            if self.writable_dirs:
                await anyio.to_thread.run_sync(_abspath.make_dirs, client, container_id, self.writable_dirs)
            await anyio.to_thread.run_sync(client.api.start, container_id)
            with anyio.fail_after(self.start_timeout_s):
                hello, _ = await channel.receive()
            if not hello.get("hello"):
                raise ChannelClosed(f"unexpected first frame from the runner: {hello!r}")
        except BaseException as exc:
            if channel is not None:
                channel.close()
            if container_id is not None:
                with anyio.CancelScope(shield=True):
                    await self.remove(container_id)
            if isinstance(exc, docker.errors.ImageNotFound):
                raise BackendUnavailable(
                    f"the image {self.image!r} is not on this engine; build it with {_SETUP} "
                    f"or set {IMAGE_ENV} / image= to another image",
                    backend=_NAME,
                ) from exc
            if isinstance(exc, docker.errors.APIError):
                text = str(exc.explanation or exc)
                if "executable file not found" in text or "no such file or directory" in text:
                    raise _RunnerFailed(
                        f"the image {self.image!r} cannot start the runner (it needs {needs}): {text}",
                        backend=_NAME,
                    ) from exc
                if exc.status_code is not None and exc.status_code < 500:
                    raise BackendUnavailable(f"the Docker engine refused the container: {text}", backend=_NAME) from exc
                raise Transient(f"the Docker engine failed to create a container: {text}", backend=_NAME) from exc
            if isinstance(exc, requests.exceptions.RequestException):
                raise Transient(f"talking to the Docker engine failed: {exc}", backend=_NAME) from exc
            if isinstance(exc, ChannelClosed):
                raise _RunnerFailed(
                    f"the runner in image {self.image!r} did not start (it needs {needs}): {exc}",
                    backend=_NAME,
                ) from exc
            if isinstance(exc, TimeoutError):
                raise Transient(
                    f"a new container did not start within {self.start_timeout_s:g}s; the engine is overloaded "
                    "(lower creation_rate or raise start_timeout_s)",
                    backend=_NAME,
                ) from exc
            raise
        return DockerSandbox(self, container_id, channel, limits, volume, hello=hello)

    async def open_from(self, snapshot: Snapshot, limits: Limits | None = None) -> Sandbox:
        """Open a container whose workspace starts as ``snapshot`` (see ``_fork``).

        Raises:
            InvalidRequest: the snapshot is another backend object's, or released.
            BackendUnavailable, Transient: as :meth:`open`.
            SandboxCrashed: the engine refused to unpack the checkpoint.
        """
        checkpoint = check_snapshot(self.checkpoints, snapshot)
        sandbox = await self.open(limits or Limits())
        assert isinstance(sandbox, DockerSandbox)
        await fill_new(sandbox, checkpoint)
        return sandbox

    async def remove(self, container_id: str) -> None:
        """Remove one container we created and its volume; logs (never raises) on failure."""
        volume = self._created.get(container_id)
        try:
            with anyio.move_on_after(30):
                await anyio.to_thread.run_sync(lambda: _engine.remove_container(self.client, container_id, volume))
        except Exception:
            log.warning("could not remove container %s; `sandboxkit cleanup --backend docker` will", container_id[:12])
        self._created.pop(container_id, None)

    async def aclose(self) -> None:
        """Remove containers this object created that are still there, then drop the engine connection."""
        with anyio.CancelScope(shield=True):
            for container_id in list(self._created):
                await self.remove(container_id)
            for snap in list(self.checkpoints):
                snap.release_sync()
            client, self._client = self._client, None
            if client is not None:
                await anyio.to_thread.run_sync(client.close)

    async def cleanup(self, *, force: bool = False) -> int:
        """Remove the containers (and workspace volumes) labelled ``sandboxkit=1`` whose owner is gone.

        A sandbox whose creating process is still running is in use and is kept (the owner is
        identified by pid *and* start time, boot and pid namespace, so a reused pid or a reboot
        does not fool it; an owner this process cannot see, on another machine or in another
        container, is presumed alive). ``force=True`` removes them all, owners alive or not.
        With extra labels (``labels=`` or ``SANDBOXKIT_DOCKER_LABELS``), only sandboxes that
        also carry them: one job (or one test run) can clean up without touching its neighbours.

        Raises:
            BackendUnavailable: no engine is reachable.
        """
        client = await self._connect()
        scope = {**self.extra_labels, _engine.LABEL: "1"}
        keep = None if force else owner_alive
        removed: int = await anyio.to_thread.run_sync(_engine.remove_labelled, client, scope, keep)
        if force:
            self._created.clear()
        return removed

    def emergency_cleanup(self) -> None:
        """At interpreter exit: force-remove what this object created (sync, best effort, never raises)."""
        for snap in list(self.checkpoints):
            snap.release_sync()
        if not self._created or self._client is None:
            return
        for container_id, volume in list(self._created.items()):
            try:
                _engine.remove_container(self._client, container_id, volume)
            except Exception:
                log.debug("emergency removal of %s failed", container_id[:12], exc_info=True)
            self._created.pop(container_id, None)

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Checks, in order: the docker SDK, a reachable engine, the image. Says what to do for each."""
        try:
            import docker
            import docker.errors
        except ImportError:
            return Availability(False, 'the docker SDK is not installed; run: pip install "sandboxkit[docker]"')
        image = str(options.get("image") or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE)
        base_url = options.get("base_url")
        try:
            client = docker.DockerClient(base_url=str(base_url), timeout=5) if base_url else docker.from_env(timeout=5)
        except Exception as exc:
            return Availability(False, f"{_engine_hint(str(base_url) if base_url else None)} ({exc})")
        try:
            client.ping()
        except Exception as exc:
            client.close()
            return Availability(False, f"{_engine_hint(str(base_url) if base_url else None)} ({exc})")
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            return Availability(
                False, f"image {image!r} not found; build it with {_SETUP} or set {IMAGE_ENV} to another image"
            )
        except Exception as exc:
            return Availability(False, f"could not inspect image {image!r}: {exc}")
        finally:
            client.close()
        return Availability(True, f"engine reachable, image {image}")


def remove_dead_owners(root: str) -> None:
    """The dead-man switch's cleanup (:mod:`sandboxkit._watchdog`): containers and volumes of dead owners.

    ``root`` is unused: Docker's sandboxes are found by label, and ``cleanup`` spares live owners.
    """
    import asyncio

    asyncio.run(DockerBackend().cleanup())
