"""Checkpoint and fork for the Docker backend: the workspace as one archive, unpacked into new containers.

What a fork can carry is bounded by the engine: process memory would need CRIU
(``docker checkpoint``, an experimental engine feature that is off here), so a fork carries the
files only (``capabilities.fork == "files"``). A container's workspace is a size-capped tmpfs
volume and its root filesystem is read-only, so neither ``docker commit`` (which leaves volumes
out) nor an image layer (the engine does not copy an image's files into a tmpfs volume) can
carry the files; the engine's archive API does, in one stream each way:

* a checkpoint is the workspace as a tar (``get_archive``) in an unlinked temporary file: it
  costs host disk, not memory, and even a SIGKILL cannot leak it (the kernel frees an unlinked
  file with its last descriptor). The stream is rewritten on its way (``_archive``): holes stay
  holes on the host (and the runner punches them out of a fork's files after the dense unpack),
  links that climb out of the workspace (which the engine's unpack refuses) travel beside the
  archive and the runner remakes them after it, and a workspace whose files could not unpack
  into a fork's ``workdir_size_mb`` is the caller's ``InvalidRequest``;
* a fork is an ordinary container (same hardening) into whose empty workspace the engine
  unpacks that tar (``put_archive``), ownership and modes included: a warm idle container of the
  pool (``capabilities.fork_warm``: reset, so as clean as a new one, and its runner already up),
  or a new one when none is idle. Every fork has its own copy, so nothing a fork does reaches
  another, the parent, or the checkpoint, and a reset removes it all.

Where a fork's time goes (100 MB in 1,000 files, 2 cores): a container start is ~120-190 ms of
engine work, an unpack ~55 ms fixed (the engine re-executes itself to untar in a chroot) plus
~120 ms per 100 MB. The archive is handed to the engine as one memory-mapped buffer (one
``sendall`` with a length), mapped once per checkpoint, rather than as a file object, which
docker-py streams as chunked 16 KiB reads: our own CPU per 100 MB fork went from ~90 ms to
~26 ms, CPU that on 2 cores the engine needs.
"""

from __future__ import annotations

import logging
import mmap
import tarfile
import tempfile
import threading
import uuid
from typing import IO, TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from sandboxkit.backends.docker._archive import (
    CheckpointTooLarge,
    Holes,
    Link,
    Rewritten,
    hole_request,
    link_blob,
    rewrite_checkpoint,
)
from sandboxkit.base import Snapshot
from sandboxkit.errors import InvalidRequest, SandboxCrashed, Transient
from sandboxkit.models import Limits

if TYPE_CHECKING:
    from sandboxkit.backends.docker.backend import DockerBackend
    from sandboxkit.backends.docker.sandbox import DockerSandbox

__all__ = ["ArchiveSnapshot", "open_forked", "restore_into", "take_snapshot"]

log = logging.getLogger(__name__)
_NAME = "docker"
#: How long the runner may take to remake a checkpoint's links or punch its holes (a syscall each).
_RESTORE_TIMEOUT_S = 30.0


class ArchiveSnapshot(Snapshot):
    """A workspace frozen as a tar archive in an unlinked temporary file on the host.

    Attributes:
        size_bytes: size of the archive (its holes included).
        links: symlinks kept beside the archive (the engine's unpack refuses them), remade after it.
        holes: runs of zeros of its files, punched out again after the (dense) unpack.
    """

    backend_name = _NAME

    def __init__(self, backend: DockerBackend, file: IO[bytes]) -> None:
        self.id = f"ckpt-{uuid.uuid4().hex[:12]}"
        self._backend = backend
        self._file = file
        self.size_bytes = 0
        self.links: list[Link] = []
        self.holes: list[Holes] = []
        self.released = False
        self._mapped: mmap.mmap | None = None
        self._map_lock = threading.Lock()

    def view(self) -> memoryview:
        """The whole archive, read-only, for concurrent forks (release the view when done).

        One mapping per checkpoint, made on first use and shared: its page-table entries are
        filled once, not once per fork (~25,000 faults per 100 MB each time otherwise).

        Raises:
            OSError: the checkpoint was released.
        """
        with self._map_lock:
            if self.released:
                raise OSError(f"checkpoint {self.id} was released")
            if self._mapped is None:
                try:
                    self._mapped = mmap.mmap(self._file.fileno(), 0, prot=mmap.PROT_READ)
                except ValueError as exc:  # an empty file: the engine sent no archive
                    raise OSError(f"checkpoint {self.id} holds no archive") from exc
            return memoryview(self._mapped)

    async def release(self) -> None:
        """Close (and so free) the archive. Idempotent; forks already made have their own copies."""
        self.release_sync()

    def release_sync(self) -> None:
        """Synchronous :meth:`release` (interpreter exit). Never raises."""
        with self._map_lock:
            if self.released:
                return
            self.released = True
            mapped, self._mapped = self._mapped, None
        self._backend._snapshots.discard(self)
        try:
            if mapped is not None:
                mapped.close()
        except BufferError:
            pass  # a fork is unpacking from it: the mapping goes with that fork's view
        try:
            self._file.close()
        except OSError:
            log.debug("closing checkpoint %s failed", self.id, exc_info=True)

    def __repr__(self) -> str:
        return f"<ArchiveSnapshot {self.id} bytes={self.size_bytes}>"


def _archive_into(client: Any, container_id: str, workdir: str, file: IO[bytes], cap: int) -> Rewritten:
    """``get_archive`` by hand: the response is closed when the copy stops early (too large).

    ``get_archive``'s generator keeps its response open when abandoned, and the engine then
    blocks the next archive call on this container until its own times out (120 s).
    """
    api = client.api
    response = api.get(
        api._url("/containers/{0}/archive", container_id),
        params={"path": workdir + "/."},  # entries "./...": the workspace's contents
        headers={"Accept-Encoding": "identity"},
        stream=True,
    )
    try:
        api._raise_for_status(response)
        return rewrite_checkpoint(response.iter_content(1 << 20, False), file, workdir, cap)
    finally:
        response.close()


async def take_snapshot(sandbox: DockerSandbox) -> ArchiveSnapshot:
    """Archive ``sandbox``'s workspace into a new checkpoint (holding the sandbox: nothing runs meanwhile).

    Raises:
        InvalidRequest: the workspace's files need more than ``workdir_size_mb`` unpacked (sparse
            files count whole: the engine unpacks them dense), so no fork could hold them.
        SandboxCrashed: the container is gone or the engine refused (or sent no tar stream).
        Transient: talking to the engine failed.
    """
    backend = sandbox._backend
    snap = ArchiveSnapshot(backend, tempfile.TemporaryFile(prefix="sandboxkit-ckpt-"))  # noqa: SIM115
    backend._snapshots.add(snap)
    cap = backend.workdir_size_mb << 20
    try:
        async with sandbox._lock:
            done = await sandbox._sdk(_archive_into, backend.workdir, snap._file, cap)
        snap.size_bytes, snap.links, snap.holes = done.length, done.links, done.holes
    except CheckpointTooLarge as exc:
        snap.release_sync()
        raise InvalidRequest(
            f"cannot checkpoint: the workspace's files need more than {exc.needed >> 20} MB unpacked (sparse files "
            f"count whole, as a fork unpacks them dense), more than workdir_size_mb={backend.workdir_size_mb}; "
            "remove or shrink large files first, or give the backend a larger workdir_size_mb",
            backend=_NAME,
            sandbox_id=sandbox.id,
        ) from None
    except tarfile.TarError as exc:
        snap.release_sync()
        raise sandbox._crashed(f"the Docker engine sent no readable archive of the workspace: {exc}") from exc
    except BaseException:
        snap.release_sync()
        raise
    return snap


def _unpack(client: Any, container_id: str, workdir: str, snap: ArchiveSnapshot) -> None:
    # A buffer, not a file object: docker-py sends it with one sendall and a Content-Length.
    with snap.view() as view:
        if not client.api.put_archive(container_id, workdir, view):
            raise OSError(f"the engine did not unpack checkpoint {snap.id}")


async def _finish_unpack(sandbox: DockerSandbox, snap: ArchiveSnapshot) -> None:
    """Have the runner punch the files' holes and make the links the archive could not carry (lock held).

    Holes first: their paths are then walked before any link the checkpoint carried apart exists.
    """
    if snap.holes:
        runs, paths = hole_request(snap.holes)
        await sandbox._call_locked({"op": "holes", "runs": runs}, [paths], _RESTORE_TIMEOUT_S)
    if snap.links:
        await sandbox._call_locked({"op": "links"}, [link_blob(snap.links)], _RESTORE_TIMEOUT_S)


def _check_snapshot(backend: DockerBackend, snapshot: Snapshot) -> ArchiveSnapshot:
    if not isinstance(snapshot, ArchiveSnapshot) or snapshot._backend is not backend:
        raise InvalidRequest(
            f"cannot open a docker sandbox from {snapshot!r}: it was taken by another backend object", backend=_NAME
        )
    if snapshot.released:
        raise InvalidRequest(
            f"checkpoint {snapshot.id} was released; fork before releasing it, or take a new one", backend=_NAME
        )
    return snapshot


async def restore_into(sandbox: DockerSandbox, snapshot: Snapshot) -> bool:
    """Unpack ``snapshot`` into a warm sandbox whose workspace is empty (see :meth:`Sandbox.restore`).

    False (the pool then discards the sandbox) for a foreign or released snapshot, a closed or
    broken sandbox, or a failed unpack; the sandbox is marked broken in the last case, so it can
    never be reused half-filled.
    """
    try:
        snap = _check_snapshot(sandbox._backend, snapshot)
    except InvalidRequest:
        return False
    async with sandbox._lock:
        if sandbox._closed or sandbox._broken is not None:
            return False
        try:
            await sandbox._sdk(_unpack, sandbox._workdir, snap)
            await _finish_unpack(sandbox, snap)
        except Exception as exc:  # SandboxError, OSError, or anything docker-py raises: never half-filled
            sandbox._break("a checkpoint did not unpack")
            log.info("restoring checkpoint %s into docker sandbox %s failed: %s", snap.id, sandbox.id, exc)
            return False
        except BaseException:
            sandbox._break("an unpack was cancelled")
            raise
    return True


async def open_forked(backend: DockerBackend, snapshot: Snapshot, limits: Limits) -> DockerSandbox:
    """Open a new container and unpack ``snapshot`` into its workspace.

    Raises:
        InvalidRequest: ``snapshot`` is another backend object's, or released.
        BackendUnavailable, Transient: as :meth:`DockerBackend.open`.
        SandboxCrashed: the engine refused to unpack the archive.
    """
    from sandboxkit.backends.docker.sandbox import DockerSandbox

    snap = _check_snapshot(backend, snapshot)
    sandbox = await backend.open(limits)
    assert isinstance(sandbox, DockerSandbox)
    try:
        async with sandbox._lock:
            await sandbox._sdk(_unpack, backend.workdir, snap)
            await _finish_unpack(sandbox, snap)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await sandbox.close()
        if isinstance(exc, (OSError, SandboxCrashed)) and snap.released:
            raise InvalidRequest(f"checkpoint {snap.id} was released while forking", backend=_NAME) from exc
        if isinstance(exc, OSError):
            raise Transient(str(exc), backend=_NAME, sandbox_id=sandbox.id) from exc
        raise
    return sandbox
