"""Absolute paths in a container (``/testbed/x.txt``, ``/tests/test.sh``) through the engine's archive API.

Why the archive API and not the in-container runner: the engine resolves every path inside
the container's own root (symlinks included: a planted ``etc -> /etc`` names the container's
``/etc``, never the host's), it reaches every layer and volume of the container, and it keeps
this feature independent of the runner's protocol. What it cannot reach is said up front:

* ``/tmp``, ``/dev``, ``/proc``, ``/sys``: tmpfs and kernel filesystems private to the container
  (the engine would write *under* them, where no program looks), so they are refused;
* a read-only root (the default): writing outside the workspace needs ``writable_root=True``,
  and the engine's refusal is turned into an error that says so.

Writes create missing parent directories owned by the program's user (so ``/logs/verifier``
created here is writable by the program) and never touch directories that already exist.
"""

from __future__ import annotations

import base64
import io
import json
import posixpath
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any

from sandboxkit.backends.docker._engine import tar_entry
from sandboxkit.errors import InvalidRequest

__all__ = [
    "GO_MODE_DIR",
    "GO_MODE_SYMLINK",
    "PRIVATE_MOUNTS",
    "check_reachable",
    "make_dirs",
    "put_files",
    "stat_path",
    "under",
]

_NAME = "docker"
#: Filesystems of a container the archive API cannot reach (private tmpfs and kernel mounts).
PRIVATE_MOUNTS = ("/tmp", "/dev", "/proc", "/sys")
#: Go's ``os.ModeDir`` and ``os.ModeSymlink`` bits in the engine's path stat.
GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27


def under(path: str, directory: str) -> str | None:
    """``path`` relative to ``directory`` if it lies inside it (``""`` for the directory itself), else None."""
    if path == directory:
        return ""
    if path.startswith(directory.rstrip("/") + "/"):
        return path[len(directory.rstrip("/")) + 1 :]
    return None


def check_reachable(path: str, sandbox_id: str | None) -> None:
    """Refuse absolute paths on the container's private mounts.

    Raises:
        InvalidRequest: ``path`` is in ``/tmp``, ``/dev``, ``/proc`` or ``/sys``.
    """
    for mount in PRIVATE_MOUNTS:
        if under(path, mount) is not None:
            raise InvalidRequest(
                f"file path {path!r} is on {mount}, a filesystem private to the container that the Docker "
                "engine's file API cannot reach; use the workspace or another absolute path (or exec a command)",
                backend=_NAME,
                sandbox_id=sandbox_id,
            )


def stat_path(client: Any, container_id: str, path: str) -> dict[str, Any] | None:
    """The engine's stat of ``path`` in the container (``HEAD .../archive``), or None if it does not exist.

    Raises:
        docker.errors.NotFound: the container itself is gone.
    """
    import docker.errors

    api = client.api
    response = api.head(api._url("/containers/{0}/archive", container_id), params={"path": path})
    if response.status_code == 404:
        # A missing path and a missing container both answer 404; tell them apart by the root.
        if path != "/" and stat_path(client, container_id, "/") is not None:
            return None
        raise docker.errors.NotFound(f"no such container: {container_id}")
    api._raise_for_status(response)
    header = response.headers.get("X-Docker-Container-Path-Stat", "")
    return dict(json.loads(base64.b64decode(header))) if header else {}


def _existing_ancestor(client: Any, container_id: str, directory: str, sandbox_id: str | None) -> str:
    """The deepest directory at or above ``directory`` that exists in the container."""
    current = directory
    while True:
        found = stat_path(client, container_id, current)
        if found is not None:
            if not int(found.get("mode", 0)) & GO_MODE_DIR:
                raise InvalidRequest(
                    f"{current!r} exists in the sandbox and is not a directory; cannot create files below it",
                    backend=_NAME,
                    sandbox_id=sandbox_id,
                )
            return current
        current = posixpath.dirname(current)


def put_files(
    client: Any, container_id: str, files: Mapping[str, bytes], sandbox_id: str | None, writable_root: bool
) -> None:
    """Write files at absolute (checked, normalised) paths: one archive per parent directory.

    Raises:
        InvalidRequest: the container's root is read-only there, or a parent is not a directory.
        docker.errors.APIError: any other refusal of the engine.
    """
    import docker.errors

    by_parent: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        by_parent.setdefault(posixpath.dirname(path), {})[posixpath.basename(path)] = data
    for parent, children in by_parent.items():
        base = _existing_ancestor(client, container_id, parent, sandbox_id)
        missing = parent[len(base) :].strip("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            prefix = ""
            for part in missing.split("/") if missing else []:
                prefix = posixpath.join(prefix, part)
                tar.addfile(tar_entry(prefix, tarfile.DIRTYPE, 0o755))
            for name, data in children.items():
                info = tar_entry(posixpath.join(prefix, name), tarfile.REGTYPE, 0o644)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        try:
            client.api.put_archive(container_id, base, buf.getvalue())
        except docker.errors.APIError as exc:
            text = str(exc.explanation or exc)
            if "read-only" in text and not writable_root:
                raise InvalidRequest(
                    f"cannot write {sorted(children)!r} under {parent!r}: the container's root filesystem is "
                    "read-only; open the backend with writable_root=True (DockerConfig) to write outside the "
                    "workspace",
                    backend=_NAME,
                    sandbox_id=sandbox_id,
                ) from exc
            raise


def make_dirs(client: Any, container_id: str, dirs: Sequence[str]) -> None:
    """Create ``dirs`` (absolute, checked) owned by the program's user, in a created or running container.

    Existing directories are given to the program's user too (not recursively); missing
    parents are created by the engine, owned by root. One archive for all of them.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in dirs:
            tar.addfile(tar_entry(directory.lstrip("/"), tarfile.DIRTYPE, 0o755))
    client.api.put_archive(container_id, "/", buf.getvalue())
