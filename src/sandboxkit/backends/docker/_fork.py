"""Checkpoint and fork for the Docker backend: the workspace as one archive, unpacked into new containers.

What a fork can carry is bounded by the engine: process memory would need CRIU
(``docker checkpoint``, an experimental engine feature that is off here), so a fork carries the
files only (``capabilities.fork == "files"``). A container's workspace is a size-capped tmpfs
volume and its root filesystem is read-only, so neither ``docker commit`` (which leaves volumes
out) nor an image layer (the engine does not copy an image's files into a tmpfs volume) can
carry the files; the engine's archive API does, in one stream each way:

* a checkpoint is the workspace as a tar (``get_archive``) in an unlinked temporary file: it
  costs host disk, not memory, and even a SIGKILL cannot leak it (the kernel frees an unlinked
  file with its last descriptor);
* a fork is an ordinary new container (warm runner, same hardening) into whose workspace the
  engine unpacks that tar (``put_archive``), ownership and modes included. Every fork has its own
  copy, so nothing a fork does reaches another, the parent, or the checkpoint.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from typing import IO, TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from sandboxkit.base import Snapshot
from sandboxkit.errors import InvalidRequest, SandboxCrashed, Transient
from sandboxkit.models import Limits

if TYPE_CHECKING:
    from sandboxkit.backends.docker.backend import DockerBackend
    from sandboxkit.backends.docker.sandbox import DockerSandbox

__all__ = ["ArchiveSnapshot", "open_forked", "take_snapshot"]

log = logging.getLogger(__name__)
_NAME = "docker"


class ArchiveSnapshot(Snapshot):
    """A workspace frozen as a tar archive in an unlinked temporary file on the host.

    Attributes:
        size_bytes: size of the archive.
    """

    backend_name = _NAME

    def __init__(self, backend: DockerBackend, file: IO[bytes]) -> None:
        self.id = f"ckpt-{uuid.uuid4().hex[:12]}"
        self._backend = backend
        self._file = file
        self.size_bytes = 0
        self.released = False

    def reader(self) -> IO[bytes]:
        """A new read handle with its own offset (forks unpack it concurrently)."""
        return open(f"/proc/self/fd/{self._file.fileno()}", "rb")

    async def release(self) -> None:
        """Close (and so free) the archive. Idempotent; forks already made have their own copies."""
        self.release_sync()

    def release_sync(self) -> None:
        """Synchronous :meth:`release` (interpreter exit). Never raises."""
        if self.released:
            return
        self.released = True
        self._backend._snapshots.discard(self)
        try:
            self._file.close()
        except OSError:
            log.debug("closing checkpoint %s failed", self.id, exc_info=True)

    def __repr__(self) -> str:
        return f"<ArchiveSnapshot {self.id} bytes={self.size_bytes}>"


def _archive_into(client: Any, container_id: str, workdir: str, file: IO[bytes]) -> int:
    stream, _ = client.api.get_archive(container_id, workdir + "/.")  # entries "./...": the workspace's contents
    for chunk in stream:
        file.write(chunk)
    file.flush()
    return file.tell()


async def take_snapshot(sandbox: DockerSandbox) -> ArchiveSnapshot:
    """Archive ``sandbox``'s workspace into a new checkpoint (holding the sandbox: nothing runs meanwhile).

    Raises:
        SandboxCrashed: the container is gone or the engine refused.
        Transient: talking to the engine failed.
    """
    backend = sandbox._backend
    snap = ArchiveSnapshot(backend, tempfile.TemporaryFile(prefix="sandboxkit-ckpt-"))  # noqa: SIM115
    backend._snapshots.add(snap)
    try:
        async with sandbox._lock:
            snap.size_bytes = await sandbox._sdk(_archive_into, backend.workdir, snap._file)
    except BaseException:
        snap.release_sync()
        raise
    return snap


def _unpack(client: Any, container_id: str, workdir: str, snap: ArchiveSnapshot) -> None:
    with snap.reader() as data:
        if not client.api.put_archive(container_id, workdir, data):
            raise OSError(f"the engine did not unpack checkpoint {snap.id}")


async def open_forked(backend: DockerBackend, snapshot: Snapshot, limits: Limits) -> DockerSandbox:
    """Open a new container and unpack ``snapshot`` into its workspace.

    Raises:
        InvalidRequest: ``snapshot`` is another backend object's, or released.
        BackendUnavailable, Transient: as :meth:`DockerBackend.open`.
        SandboxCrashed: the engine refused to unpack the archive.
    """
    from sandboxkit.backends.docker.sandbox import DockerSandbox

    if not isinstance(snapshot, ArchiveSnapshot) or snapshot._backend is not backend:
        raise InvalidRequest(
            f"cannot open a docker sandbox from {snapshot!r}: it was taken by another backend object", backend=_NAME
        )
    if snapshot.released:
        raise InvalidRequest(
            f"checkpoint {snapshot.id} was released; fork before releasing it, or take a new one", backend=_NAME
        )
    sandbox = await backend.open(limits)
    assert isinstance(sandbox, DockerSandbox)
    try:
        await sandbox._sdk(_unpack, backend.workdir, snapshot)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await sandbox.close()
        if isinstance(exc, OSError):
            raise Transient(str(exc), backend=_NAME, sandbox_id=sandbox.id) from exc
        if isinstance(exc, SandboxCrashed) and snapshot.released:
            raise InvalidRequest(f"checkpoint {snapshot.id} was released while forking", backend=_NAME) from exc
        raise
    return sandbox
