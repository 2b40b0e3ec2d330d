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
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import IO, Any, Protocol, TypeVar

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
from sandboxkit.base import Snapshot, own_snapshot
from sandboxkit.errors import InvalidRequest, SandboxCrashed, Transient

__all__ = ["ArchiveSnapshot", "Forkable", "HeldSandbox", "check_snapshot", "fill_new", "restore_into", "take_snapshot"]

log = logging.getLogger(__name__)
T = TypeVar("T")
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

    def __init__(self, registry: set[ArchiveSnapshot], file: IO[bytes]) -> None:
        self.id = f"ckpt-{uuid.uuid4().hex[:12]}"
        #: The backend's set of live checkpoints (this one leaves it when released); also whose it is.
        self._registry = registry
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
        self._registry.discard(self)
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


class HeldSandbox(Protocol):
    """A Docker sandbox held for a checkpoint's transfer (nothing else runs in it meanwhile).

    What :meth:`DockerSandbox.held <sandboxkit.backends.docker.DockerSandbox.held>` hands out: the
    engine, the runner and the two ways to fail, and none of the sandbox's own state.
    """

    @property
    def id(self) -> str: ...
    @property
    def workdir(self) -> str:
        """The workspace's path in the container."""
        ...

    @property
    def usable(self) -> bool:
        """Neither closed nor broken."""
        ...

    async def sdk(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(client, container_id, *args)`` in a worker thread, its errors translated."""
        ...

    async def call(
        self, header: dict[str, Any], blobs: Sequence[bytes], timeout_s: float
    ) -> tuple[dict[str, Any], bytes]:
        """One request to the runner, under a host-side deadline."""
        ...

    def crashed(self, message: str) -> SandboxCrashed:
        """The error for an engine or runner that failed this sandbox."""
        ...

    def mark_broken(self, why: str) -> None:
        """Never use the sandbox again (it may be half-filled)."""
        ...


class Forkable(Protocol):
    """A Docker sandbox as checkpoints see it: an id, a way to hold it, and ``close``."""

    @property
    def id(self) -> str: ...
    def held(self) -> AbstractAsyncContextManager[HeldSandbox]: ...
    async def close(self) -> None: ...


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


async def take_snapshot(sandbox: Forkable, registry: set[ArchiveSnapshot], workdir_size_mb: int) -> ArchiveSnapshot:
    """Archive ``sandbox``'s workspace into a new checkpoint (holding the sandbox: nothing runs meanwhile).

    Args:
        sandbox: the sandbox to copy.
        registry: the backend's live checkpoints; the new one joins it before anything can leak.
        workdir_size_mb: a fork's workspace size: a checkpoint whose files would not unpack into it is refused.

    Raises:
        InvalidRequest: the workspace's files need more than ``workdir_size_mb`` unpacked (sparse
            files count whole: the engine unpacks them dense), so no fork could hold them.
        SandboxCrashed: the container is gone or the engine refused (or sent no tar stream).
        Transient: talking to the engine failed.
    """
    snap = ArchiveSnapshot(registry, tempfile.TemporaryFile(prefix="sandboxkit-ckpt-"))  # noqa: SIM115
    registry.add(snap)
    cap = workdir_size_mb << 20
    try:
        async with sandbox.held() as held:
            try:
                done = await held.sdk(_archive_into, held.workdir, snap._file, cap)
            except tarfile.TarError as exc:
                raise held.crashed(f"the Docker engine sent no readable archive of the workspace: {exc}") from exc
        snap.size_bytes, snap.links, snap.holes = done.length, done.links, done.holes
    except CheckpointTooLarge as exc:
        snap.release_sync()
        raise InvalidRequest(
            f"cannot checkpoint: the workspace's files need more than {exc.needed >> 20} MB unpacked (sparse files "
            f"count whole, as a fork unpacks them dense), more than workdir_size_mb={workdir_size_mb}; "
            "remove or shrink large files first, or give the backend a larger workdir_size_mb",
            backend=_NAME,
            sandbox_id=sandbox.id,
        ) from None
    except BaseException:
        snap.release_sync()
        raise
    return snap


def _unpack(client: Any, container_id: str, workdir: str, snap: ArchiveSnapshot) -> None:
    # A buffer, not a file object: docker-py sends it with one sendall and a Content-Length.
    with snap.view() as view:
        if not client.api.put_archive(container_id, workdir, view):
            raise OSError(f"the engine did not unpack checkpoint {snap.id}")


async def _fill(held: HeldSandbox, snap: ArchiveSnapshot) -> None:
    """Unpack ``snap`` into the held sandbox's empty workspace, then have the runner punch the files'
    holes and make the links the archive could not carry.

    Holes first: their paths are then walked before any link the checkpoint carried apart exists.
    """
    await held.sdk(_unpack, held.workdir, snap)
    if snap.holes:
        runs, paths = hole_request(snap.holes)
        await held.call({"op": "holes", "runs": runs}, [paths], _RESTORE_TIMEOUT_S)
    if snap.links:
        await held.call({"op": "links"}, [link_blob(snap.links)], _RESTORE_TIMEOUT_S)


def check_snapshot(registry: set[ArchiveSnapshot], snapshot: Snapshot) -> ArchiveSnapshot:
    """``snapshot`` as a checkpoint sandboxes can start from: taken by the backend whose ``registry`` this is.

    Raises:
        InvalidRequest: ``snapshot`` is another backend object's, or released.
    """
    return own_snapshot(snapshot, ArchiveSnapshot, lambda mine: mine._registry is registry, _NAME)


async def restore_into(sandbox: Forkable, registry: set[ArchiveSnapshot], snapshot: Snapshot) -> bool:
    """Unpack ``snapshot`` into a warm sandbox whose workspace is empty (see :meth:`Sandbox.restore`).

    False (the pool then discards the sandbox) for a foreign or released snapshot, a closed or
    broken sandbox, or a failed unpack; the sandbox is marked broken in the last case, so it can
    never be reused half-filled.
    """
    try:
        snap = check_snapshot(registry, snapshot)
    except InvalidRequest:
        return False
    async with sandbox.held() as held:
        if not held.usable:
            return False
        try:
            await _fill(held, snap)
        except Exception as exc:  # SandboxError, OSError, or anything docker-py raises: never half-filled
            held.mark_broken("a checkpoint did not unpack")
            log.info("restoring checkpoint %s into docker sandbox %s failed: %s", snap.id, held.id, exc)
            return False
        except BaseException:
            held.mark_broken("an unpack was cancelled")
            raise
    return True


async def fill_new(sandbox: Forkable, snap: ArchiveSnapshot) -> None:
    """Unpack ``snap`` into a just-opened container (``DockerBackend.open_from``); close it on failure.

    Raises:
        InvalidRequest: ``snap`` was released meanwhile.
        SandboxCrashed: the engine refused to unpack the archive.
        Transient: talking to the engine failed.
    """
    try:
        async with sandbox.held() as held:
            await _fill(held, snap)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await sandbox.close()
        if isinstance(exc, (OSError, SandboxCrashed)) and snap.released:
            raise InvalidRequest(f"checkpoint {snap.id} was released while forking", backend=_NAME) from exc
        if isinstance(exc, OSError):
            raise Transient(str(exc), backend=_NAME, sandbox_id=sandbox.id) from exc
        raise
