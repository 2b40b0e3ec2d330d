"""Synchronous Docker Engine calls, each run in a worker thread by the sandbox or the backend.

Everything that decides how a container is confined lives in :func:`create_container`, so
the hardening can be read (and reviewed) in one place:

* ``network_mode="none"`` unless the limits allow network (then the configured network);
* memory (swap included, so no swap), CPU quota and pids limits on the container's cgroup;
* ``cap_drop=ALL``, ``no-new-privileges``, programs as uid/gid 1000 with no capability, a private
  IPC namespace, no core dumps; the runner (PID 1) as root with only ``RUNNER_CAPS``, so no
  program can ``prlimit``, renice or signal it (same-uid rules would let it);
* a read-only root (unless ``writable_root``); the workspace is a size-capped tmpfs *volume* (a ``--tmpfs`` mount is
  invisible to the daemon, so ``put_archive``/``get_archive`` could not reach it), ``/tmp`` a
  size-capped tmpfs;
* ``auto_remove`` with the runner as PID 1 on an attach that closes stdin when we disconnect:
  if this process dies, the runner sees EOF, exits, and the daemon deletes the container and
  its volume by itself. ``sandboxkit cleanup`` covers the rest (a daemon restart, SIGSTOP...).
"""

from __future__ import annotations

import functools
import io
import logging
import math
import posixpath
import socket
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboxkit._standalone import standalone_source
from sandboxkit.backends.docker._results import PATH
from sandboxkit.backends.docker._static import MOUNT_PATH
from sandboxkit.models import Limits

__all__ = [
    "LABEL",
    "SANDBOX_UID",
    "ContainerSpec",
    "attach",
    "create_container",
    "get_file",
    "put_files",
    "remove_container",
    "remove_labelled",
    "remove_volume",
    "runner_source",
    "tar_entry",
    "update_limits",
]

log = logging.getLogger(__name__)

LABEL = "sandboxkit"
SANDBOX_UID = 1000
#: Memory the runner needs on top of the program's limit (it is ~15 MB resident, plus output buffers).
RUNNER_OVERHEAD_MB = 24
#: Processes (threads count) the runner itself takes from the container's pids limit: the Python
#: runner is one thread; the static runner's Go runtime a few, plus its brief second stage.
RUNNER_PIDS = 1
STATIC_RUNNER_PIDS = 8
#: Capabilities of the runner (root, PID 1): become the program's user in each child, kill the
#: program's processes. Not DAC_OVERRIDE: it opens files (and removes IPC objects) as the program.
RUNNER_CAPS = ("SETUID", "SETGID", "KILL")
_CPU_PERIOD = 100_000


@functools.cache
def runner_source() -> str:
    """Source of the in-container runner, passed as ``python3 -c`` (no file to ship, nothing to tamper with)."""
    return standalone_source(Path(__file__).with_name("_runner.py"))


@dataclass(frozen=True)
class ContainerSpec:
    """How to create one sandbox container."""

    image: str
    workdir: str
    workdir_size_mb: int
    tmp_size_mb: int
    network: str
    limits: Limits
    volume: str
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The root filesystem is writable (absolute paths outside the workspace; see ``_abspath``).
    writable_root: bool = False
    #: The static runner binary on the engine's host (bind-mounted read-only), or None for the Python runner.
    runner: str | None = None


def resource_kwargs(limits: Limits) -> dict[str, Any]:
    """cgroup settings for ``limits``, in the form both create and update accept."""
    out: dict[str, Any] = {}
    if limits.memory_mb is not None:
        # The runner holds up to two streams of two steps (compile + run) at the output cap.
        buffers_mb = math.ceil(4 * limits.output_bytes / (1 << 20))
        mem = f"{limits.memory_mb + RUNNER_OVERHEAD_MB + buffers_mb}m"
        out.update(mem_limit=mem, memswap_limit=mem)
    if limits.cpus is not None:
        out.update(cpu_period=_CPU_PERIOD, cpu_quota=max(1000, math.ceil(limits.cpus * _CPU_PERIOD)))
    return out


def create_container(client: Any, spec: ContainerSpec) -> str:
    """Create (not start) a hardened container running the runner; returns its id."""
    from docker.types import DriverConfig, LogConfig, Mount, Ulimit

    api = client.api
    workspace = Mount(
        target=spec.workdir,
        source=spec.volume,  # named, not anonymous: Docker 20.10 keeps --mount anonymous volumes after rm -v
        type="volume",
        labels=dict(spec.labels),
        driver_config=DriverConfig(
            "local",
            {
                "type": "tmpfs",
                "device": "tmpfs",
                "o": f"size={spec.workdir_size_mb}m,uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0700,nosuid,nodev",
            },
        ),
    )
    limits = spec.limits
    host_config = api.create_host_config(
        network_mode=spec.network if limits.network else "none",
        pids_limit=limits.pids + runner_pids(spec.runner is not None) if limits.pids is not None else None,
        cap_drop=["ALL"],
        cap_add=list(RUNNER_CAPS),  # the runner's (PID 1, root); the program, uid 1000, gets none
        security_opt=["no-new-privileges"],
        read_only=not spec.writable_root,
        ipc_mode="private",
        mounts=[workspace, *_runner_mounts(spec)],
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={spec.tmp_size_mb}m,mode=1777"},
        shm_size=f"{spec.tmp_size_mb}m",
        ulimits=[Ulimit(name="core", soft=0, hard=0)],
        log_config=LogConfig(type="none"),  # the runner's stdout is our protocol; never log it to disk
        auto_remove=True,
        **resource_kwargs(limits),
    )
    created = api.create_container(
        spec.image,
        # The entrypoint is set too: an image's own ENTRYPOINT must not wrap (or replace) the runner.
        entrypoint=[MOUNT_PATH] if spec.runner else ["python3"],
        command=[spec.workdir, str(SANDBOX_UID)]
        if spec.runner
        else ["-c", runner_source(), spec.workdir, str(SANDBOX_UID)],
        user="0:0",  # the runner only: each program runs as SANDBOX_UID (see _runner.supervise)
        working_dir=spec.workdir,
        hostname="sandbox",
        # = what programs get from the Python runner (_results); the static one runs on one CPU thread.
        environment={
            "LANG": "C.UTF-8",
            "PATH": PATH,
            "HOME": spec.workdir,
            **({"GOMAXPROCS": "1"} if spec.runner else {}),
        },
        labels=dict(spec.labels),
        stdin_open=True,
        detach=False,  # with stdin_open: AttachStdin + StdinOnce, so our hang-up closes the runner's stdin
        host_config=host_config,
    )
    return str(created["Id"])


def _runner_mounts(spec: ContainerSpec) -> list[Any]:
    """The static runner, read-only at :data:`MOUNT_PATH` (nothing of it is writable from inside)."""
    from docker.types import Mount

    if spec.runner is None:
        return []
    return [Mount(target=MOUNT_PATH, source=spec.runner, type="bind", read_only=True)]


def attach(client: Any, container_id: str) -> tuple[socket.socket, Any]:
    """Attach to the (not yet started) container: returns the raw socket and the object owning it."""
    params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    owner = client.api.attach_socket(container_id, params=params)
    sock = getattr(owner, "_sock", owner)  # SocketIO over a unix socket; a socket already over TLS
    return sock, owner


def runner_pids(static: bool) -> int:
    """What the runner takes from the pids limit (the limit asked for is the program's own)."""
    return STATIC_RUNNER_PIDS if static else RUNNER_PIDS


def update_limits(client: Any, container_id: str, limits: Limits, extra_pids: int = RUNNER_PIDS) -> None:
    """Apply a run's memory / CPU / pids limits to a live container (``extra_pids``: the runner's share)."""
    kwargs = resource_kwargs(limits)
    if kwargs:
        client.api.update_container(container_id, **kwargs)
    if limits.pids is not None:
        # docker-py's update_container has no pids parameter; the Engine API has had it since 1.40.
        api = client.api
        url = api._url("/containers/{0}/update", container_id)
        api._result(api._post_json(url, data={"PidsLimit": limits.pids + extra_pids}), True)


def remove_container(client: Any, container_id: str, volume: str | None = None) -> bool:
    """Force-remove a container, then its workspace volume; False if the container was already gone."""
    import docker.errors

    removed = True
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        removed = False
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: "removal already in progress" (auto_remove beat us to it)
            raise
        removed = False
    if volume is not None:
        remove_volume(client, volume)
    return removed


def remove_volume(client: Any, name: str, attempts: int = 20) -> None:
    """Remove a volume, waiting briefly while an in-flight container removal still holds it."""
    import docker.errors

    for _ in range(attempts):
        try:
            client.api.remove_volume(name, force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise
            time.sleep(0.1)


def remove_labelled(
    client: Any, labels: Mapping[str, str], keep: Callable[[Mapping[str, str]], bool] | None = None
) -> int:
    """Remove every container (any state) and volume carrying all ``labels``, except those ``keep``
    says to keep (it is given each one's labels).

    Returns how many sandboxes were removed: containers, plus workspace volumes whose container
    had already gone (a runner whose host died removes its own container, not its volume).
    """
    import docker.errors

    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    removed = 0
    attached: set[str] = set()
    for item in client.api.containers(all=True, filters=filters):
        if keep is not None and keep(item.get("Labels") or {}):
            continue
        attached.update(m.get("Name", "") for m in item.get("Mounts") or [])
        removed += remove_container(client, item["Id"])
    for volume in (client.api.volumes(filters=filters) or {}).get("Volumes") or []:
        if keep is not None and keep(volume.get("Labels") or {}):
            continue
        try:
            remove_volume(client, volume["Name"])
            removed += volume["Name"] not in attached
        except docker.errors.APIError:
            log.warning("could not remove volume %s", volume["Name"])
    return removed


def put_files(client: Any, container_id: str, workdir: str, files: Mapping[str, bytes]) -> None:
    """Write files (relative, already checked paths) into the workspace through one tar archive.

    Parent directories get their own entries owned by the sandbox user, so the program can
    write next to them, and so an existing symlink in their place is replaced, not followed.
    """
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            parent = posixpath.dirname(path)
            chain = []
            while parent and parent not in dirs:
                chain.append(parent)
                dirs.add(parent)
                parent = posixpath.dirname(parent)
            for folder in reversed(chain):
                tar.addfile(tar_entry(folder, tarfile.DIRTYPE, 0o755))
            info = tar_entry(path, tarfile.REGTYPE, 0o644)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    client.api.put_archive(container_id, workdir, buf.getvalue())


def tar_entry(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    """A tar member owned by the program's user, so what the host puts in a container is the program's to change."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid = info.gid = SANDBOX_UID
    info.uname = info.gname = "sandbox"
    return info


def get_file(client: Any, container_id: str, workdir: str, path: str) -> bytes | None:
    """Read one regular file of the workspace; ``None`` if it is missing or not a regular file."""
    import docker.errors

    try:
        stream, _stat = client.api.get_archive(container_id, posixpath.join(workdir, path))
    except docker.errors.NotFound as exc:
        if "no such container" in str(exc).lower():
            raise
        return None
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r:") as tar:
        member = tar.next()
        if member is None or not member.isreg():
            return None
        extracted = tar.extractfile(member)
        return extracted.read() if extracted is not None else None
