"""Image root filesystems for the subprocess backend: a cached image, and one copy-on-write view per sandbox.

``SubprocessBackend(rootfs=...)`` takes a directory or a tarball (``docker export`` output, any
compression ``tarfile`` reads). It is unpacked once into a cache keyed by its sha256
(:func:`load_image`) and never written again. Each sandbox gets a :class:`RootView`: an overlay
whose lower layer is that cache and whose upper and work directories are on the sandbox's own
size-capped tmpfs, mounted where only that sandbox's bubblewrap binds it as ``/``. So:

* absolute paths are real: the program sees the image as ``/``, with ``/testbed`` (the default
  working directory), ``/tests`` and ``/logs`` present, and the host reaches the same files;
* writes never touch the image or a sibling (they land in this sandbox's upper layer);
* ``reset`` discards the upper layer (unmount, wipe, mount again: a few milliseconds);
* closing unmounts it; a crash leaves a mount below the sandbox's workspace, which
  ``sandboxkit cleanup`` removes with the workspace (see ``_cleanup``).

Ownership: an image's files belong to its root, and agents expect to be root in their image
(``git`` refuses a repository owned by someone else). So unpacked files are owned by one
host uid, :data:`ROOTFS_UID`, and each rootfs sandbox runs as a host uid of its own, seen inside
its user namespace as uid 0 with no capabilities; its overlay's lower layer is an idmapped bind
of the image (``_idmap``) that shows :data:`ROOTFS_UID`'s files as that uid, at no per-file cost.
Own uids matter beyond files: the kernel counts inotify instances and watches, message queue
bytes and pending signals per user, across every namespace, so sandboxes sharing a uid could
starve each other (one holding 128 inotify instances broke ``inotify_init`` in all the others).
Where the image's filesystem cannot be idmapped (Linux < 5.19 for overlays over idmapped layers),
sandboxes fall back to sharing :data:`ROOTFS_UID`, and ``capabilities.missing_protections`` says so.

Host-side file access resolves paths against the sandbox's root, component by component and by
directory fd (:func:`resolve_in_root`, like ``openat2(RESOLVE_IN_ROOT)``): a planted ``etc -> /etc``
link names the image's ``/etc``, never the host's, and ``..`` stops at the root. The resolved
name is then opened below the root's fd with no link followed at all (``_beneath``), so a link
swapped in after the resolution makes the open fail; it never reaches the host.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import posixpath
import secrets
import shutil
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sandboxkit.backends.subprocess import _beneath as beneath
from sandboxkit.backends.subprocess import _libc
from sandboxkit.backends.subprocess._idmap import can_idmap, idmapped_bind
from sandboxkit.backends.subprocess._untar import unpack_tarball
from sandboxkit.backends.subprocess._workspace import Workspace
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import check_sandbox_path

__all__ = [
    "AGENT_DIRS",
    "DEFAULT_WORKDIR",
    "PRIVATE_MOUNTS",
    "PYTHON_PROBE",
    "ROOTFS_UID",
    "RootImage",
    "RootView",
    "default_cache",
    "gives_own_uids",
    "has_overlay_mounts",
    "load_image",
    "read_files",
    "resolve_in_root",
    "split_paths",
    "write_files",
]

log = logging.getLogger(__name__)

#: Host uid that owns unpacked images and runs rootfs sandboxes (uid 0 inside their user namespace).
#: Just below the per-sandbox uid range of ``_isolation``, so it never collides with one.
ROOTFS_UID = 1_499_999_999
#: Where programs start in a rootfs sandbox unless ``workdir=`` says otherwise (SWE/Harbor tasks' habit).
DEFAULT_WORKDIR = "/testbed"
#: Directories every rootfs sandbox has, empty unless the image has them (agent tasks' conventions).
AGENT_DIRS = ("/tests", "/logs")
#: Filesystems private to the sandbox's namespaces: the host cannot reach what programs see there.
PRIVATE_MOUNTS = ("/tmp", "/dev", "/proc", "/sys")
#: Can this image's python3 run the fork server (``_server_main``'s imports, Python >= 3.8)?
PYTHON_PROBE = "import sys, _socket, atexit, builtins, ctypes, gc, marshal, os, resource, signal\nsys.exit(sys.version_info < (3, 8))"
_MARKER = ".sandboxkit-image"


def default_cache() -> str:
    """``$XDG_CACHE_HOME/sandboxkit/rootfs`` (``~/.cache/sandboxkit/rootfs``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sandboxkit", "rootfs")


# ---------------------------------------------------------------------- resolution


def resolve_in_root(root: str, path: str, *, follow_last: bool) -> str:
    """The host path of ``path`` (absolute, as the sandbox sees it) under the host directory ``root``.

    Symlinks are resolved against ``root``, never the host's ``/``: an absolute target restarts
    from ``root``, ``..`` stops there. The walk holds a directory fd per component and looks each
    name up relative to it (``fstatat``, ``readlinkat``, ``openat(O_NOFOLLOW)``), so a link swapped
    in meanwhile is read as a link of the view, never followed by the host. Every component of
    the answer that existed was a real directory (with ``follow_last=False`` the last one may be a
    link). Components past a missing one are kept as written.

    The answer is a name, not an open file: the caller opens it below ``root`` with no link
    followed (``Workspace``), so a swap after this walk makes that open fail, never escape.

    Raises:
        OSError: ELOOP after 40 links (a cycle), or when ``root`` itself cannot be opened.
    """
    top = beneath.open_dir(root)
    try:
        return os.path.join(root, *_walk_in_root(top, path, follow_last))
    finally:
        os.close(top)


def _walk_in_root(top: int, path: str, follow_last: bool) -> list[str]:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[tuple[str, int | None]] = []  # (name, fd of that directory, or None past a missing one)
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == "..":
                if done:
                    _close(done.pop()[1])
                continue
            here = done[-1][1] if done else top
            mode = None
            if here is not None:
                try:
                    mode = os.stat(name, dir_fd=here, follow_symlinks=False).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    mode = None
            if mode is not None and stat.S_ISLNK(mode) and (parts or follow_last):
                assert here is not None
                links += 1
                if links > 40:
                    raise OSError(errno.ELOOP, f"too many levels of symbolic links in {path!r}")
                target = os.readlink(name, dir_fd=here)
                if target.startswith("/"):
                    for _, fd in done:
                        _close(fd)
                    done = []
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            fd = None
            if mode is not None and stat.S_ISDIR(mode) and parts:
                assert here is not None
                try:
                    fd = os.open(name, beneath.DIR_FLAGS, dir_fd=here)
                except OSError as exc:  # swapped for a link since the stat: the program's doing
                    raise OSError(errno.ELOOP, f"{path!r} changed while it was resolved; try again") from exc
            done.append((name, fd))
        return [name for name, _ in done]
    finally:
        for _, fd in done:
            _close(fd)


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _private_mount(inner: str) -> str | None:
    for mount in PRIVATE_MOUNTS:
        if inner == mount or inner.startswith(mount + "/"):
            return mount
    return None


# ---------------------------------------------------------------------- the cached image


@dataclass
class RootImage:
    """An unpacked image in the cache (the overlays' shared, never-written lower layer).

    Attributes:
        source: what the caller gave (a directory or a tarball).
        path: the unpacked tree.
        key: sha256 of the tarball (or of the directory's listing).
        shell: ``bash`` when the image has it, else ``sh``: what ``exec("...")`` runs.
        python_ok: whether the image's ``python3`` runs the fork server (None: not probed yet).
        own_uids: whether sandboxes get their own host uids over it (see :func:`gives_own_uids`).
    """

    source: str
    path: str
    key: str
    shell: str = "sh"
    python_ok: bool | None = None
    own_uids: bool | None = None
    _which: dict[str, bool] = field(default_factory=dict)

    def has_binary(self, name: str, search_path: str) -> bool:
        """Whether ``name`` is an executable on ``search_path`` inside the image (cached)."""
        found = self._which.get(name)
        if found is None:
            found = False
            for directory in search_path.split(":"):
                if not directory.startswith("/"):
                    continue
                try:
                    host = resolve_in_root(self.path, posixpath.join(directory, name), follow_last=True)
                    st = os.stat(host, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                    found = True
                    break
            self._which[name] = found
        return found


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _known_key(tarball: str, cache_dir: str) -> str:
    """The tarball's sha256, remembered by (path, inode, size, mtime) so a backend opens in milliseconds.

    Hashing an 800 MB ``docker export`` takes seconds; a file rewritten in place changes its
    mtime or size, which makes a new entry (and a new hash).
    """
    st = os.stat(tarball)
    ident = hashlib.sha256(f"{tarball}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    index = os.path.join(cache_dir, ".keys", ident)
    with contextlib.suppress(OSError), open(index) as f:
        key = f.read().strip()
        if len(key) == 64:
            return key
    key = _sha256_file(tarball)
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(index), mode=0o700, exist_ok=True)
        tmp = f"{index}.{secrets.token_hex(4)}"
        with open(tmp, "w") as f:
            f.write(key)
        os.replace(tmp, index)
    return key


def _sha256_tree(path: str) -> str:
    """A key for a directory: names, types, modes, sizes, mtimes and link targets of everything in it."""
    digest = hashlib.sha256(b"dir\0")
    for top, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + dirs:
            full = os.path.join(top, name)
            st = os.lstat(full)
            link = os.readlink(full) if stat.S_ISLNK(st.st_mode) else ""
            rel = os.path.relpath(full, path)
            digest.update(
                f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{link}\n".encode(errors="surrogateescape")
            )
    return digest.hexdigest()


def _copy_tree(source: str, dest: str) -> None:
    """Copy a directory image into ``dest`` with the same rules as a tarball (owner, no set-id, no devices)."""
    for top, dirs, files in os.walk(source):
        rel = os.path.relpath(top, source)
        target_dir = os.path.normpath(os.path.join(dest, rel))
        os.makedirs(target_dir, exist_ok=True)
        shutil.copymode(top, target_dir)
        for name in [*files, *[d for d in dirs if os.path.islink(os.path.join(top, d))]]:
            src, dst = os.path.join(top, name), os.path.join(target_dir, name)
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISREG(st.st_mode):
                shutil.copyfile(src, dst, follow_symlinks=False)
                os.chmod(dst, st.st_mode & 0o777)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    for top, dirs, files in os.walk(dest):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(top, name), ROOTFS_UID, ROOTFS_UID)
    os.chown(dest, ROOTFS_UID, ROOTFS_UID)


def load_image(source: str, cache_dir: str) -> RootImage:
    """Unpack ``source`` into ``cache_dir`` unless an earlier call (any process) did; return it.

    Unpacking goes to a private temporary directory renamed into place at the end, so a
    crash or a concurrent process never leaves (or sees) half an image.

    Raises:
        FileNotFoundError: ``source`` does not exist.
        ValueError: ``source`` is neither a directory nor a readable tarball, or the cache
            path holds a character an overlay mount cannot name (``,`` ``:`` or whitespace).
    """
    source = os.path.realpath(source)
    if not os.path.exists(source):
        raise FileNotFoundError(errno.ENOENT, f"root filesystem {source!r} does not exist")
    cache_dir = os.path.realpath(cache_dir)
    if any(c in cache_dir for c in ",: \t\n\\"):
        raise ValueError(f"rootfs_cache {cache_dir!r} holds ',', ':', a backslash or whitespace; pick a plainer path")
    is_dir = os.path.isdir(source)
    if not is_dir and not tarfile.is_tarfile(source):
        raise ValueError(f"root filesystem {source!r} is neither a directory nor a tar archive (docker export output)")
    key = _sha256_tree(source) if is_dir else _known_key(source, cache_dir)
    path = os.path.join(cache_dir, key)
    if not os.path.exists(os.path.join(path, _MARKER)):
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        tmp = os.path.join(cache_dir, f".tmp-{key[:16]}-{secrets.token_hex(4)}")
        os.mkdir(tmp, 0o755)
        try:
            if is_dir:
                _copy_tree(source, tmp)
            else:
                unpack_tarball(source, tmp, ROOTFS_UID)  # never follows a link: see _untar
            with open(os.path.join(tmp, _MARKER), "w") as f:
                f.write(source + "\n")
            try:
                os.rename(tmp, path)
            except OSError as exc:  # another process finished first: use theirs
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
        log.info("unpacked root filesystem %s into %s", source, path)
    image = RootImage(source=source, path=path, key=key)
    image.shell = "bash" if image.has_binary("bash", "/usr/local/bin:/usr/bin:/bin") else "sh"
    return image


def gives_own_uids(image: RootImage) -> bool:
    """Whether sandboxes over ``image`` can run as their own host uids (probed once per image).

    They can when the image's filesystem takes an idmapped mount and overlayfs takes an idmapped
    lower layer (Linux >= 5.19); otherwise they share :data:`ROOTFS_UID`.
    """
    if image.own_uids is None:
        release = tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit())
        image.own_uids = release >= (5, 19) and can_idmap(image.path, owner=ROOTFS_UID, uid=ROOTFS_UID)
        if not image.own_uids:
            log.warning("rootfs %s: no idmapped layers here; its sandboxes share host uid %d", image.source, ROOTFS_UID)
    return image.own_uids


# ---------------------------------------------------------------------- one sandbox's view


class RootView:
    """One sandbox's private, copy-on-write view of an image, mounted below its workspace.

    Args:
        image: the cached image (lower layer).
        base: the sandbox's own directory (a tmpfs owned by ``owner``), which holds ``upper``,
            ``work`` and the merged tree ``root``.
        owner: host ``(uid, gid)`` the sandbox runs as: its own (the image is shown as its through an
            idmapped bind), or :data:`ROOTFS_UID` where :func:`gives_own_uids` is false.
        workdir: the program's working directory inside (absolute).
    """

    def __init__(self, image: RootImage, base: str, owner: tuple[int, int], workdir: str) -> None:
        self.image = image
        self.owner = owner
        self.workdir = workdir
        self.upper = os.path.join(base, "upper")
        self.work = os.path.join(base, "work")
        self.root = os.path.join(base, "root")
        #: The image as this sandbox's uid sees it (an idmapped bind), when the sandbox has its own uid.
        self.lower = os.path.join(base, "lower") if owner[0] != ROOTFS_UID else image.path
        self.mounted = False

    @property
    def workdir_host(self) -> str:
        """Host path of the working directory (the sandbox's workspace)."""
        return os.path.join(self.root, self.workdir.lstrip("/"))

    def mount(self) -> None:
        """Mount a fresh overlay and create the working directory and :data:`AGENT_DIRS`.

        Raises:
            OSError: the kernel refused the overlay (no overlayfs, or not root).
        """
        for directory in (self.upper, self.work, self.root):
            os.makedirs(directory, mode=0o755, exist_ok=True)
            os.chown(directory, *self.owner)
        if self.lower != self.image.path and not os.path.ismount(self.lower):
            os.makedirs(self.lower, mode=0o755, exist_ok=True)
            idmapped_bind(self.image.path, self.lower, self.owner[0], owner=ROOTFS_UID)
        lower_root = os.stat(self.image.path)
        os.chmod(self.upper, stat.S_IMODE(lower_root.st_mode))  # the merged "/" takes the upper's mode
        _libc.mount(b"overlay", self.root, f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work}")
        self.mounted = True
        for directory in (self.workdir, *AGENT_DIRS):
            self._makedirs(resolve_in_root(self.root, directory, follow_last=True))

    def _makedirs(self, host: str) -> None:
        missing: list[str] = []
        while not os.path.isdir(host) and host != self.root:
            missing.append(host)
            host = os.path.dirname(host)
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, 0o755)
                os.lchown(directory, *self.owner)

    def repair_workdir(self) -> None:
        """Make each component of the working directory a real directory again, before the host uses it.

        The program is root in its view and may remove ``/testbed`` or replace it with a link
        (``ln -s /etc /testbed``); the host's own path to the workspace must never pass through
        such a link, so whatever is in the way is removed and the directory made anew (empty).
        The walk goes by fd from the view's root (``_beneath.make_dirs``): a process the sandbox
        kept cannot swap a component for a link between the check and the use.
        """
        if not self.mounted:
            return
        parts = [p for p in self.workdir.split("/") if p]
        if not parts:
            return
        top = beneath.open_dir(self.root)
        try:
            os.close(beneath.make_dirs(top, parts, self.owner))
        finally:
            os.close(top)

    def unmount(self) -> None:
        """Detach the overlay (idempotent; lazy, so a straggler's open file cannot block it).

        The idmapped image below it stays for :meth:`reset`; it goes with the sandbox's tmpfs.
        """
        if self.mounted:
            _libc.unmount(self.root)
            self.mounted = False

    def reset(self) -> None:
        """Discard every change: unmount, empty the upper and work layers, mount again.

        Raises:
            OSError: the overlay could not be mounted again (the sandbox is then unusable).
        """
        self.unmount()
        for directory in (self.upper, self.work):
            shutil.rmtree(directory, ignore_errors=True)
        self.mount()

    def host(self, inner: str, *, follow_last: bool) -> tuple[str, str]:
        """``(host path, resolved inner path)`` of an absolute path inside the sandbox.

        Raises:
            ValueError: the path (after its links) is on a filesystem private to the sandbox's
                namespaces (``/tmp``, ``/dev``, ``/proc``, ``/sys``), which the host cannot reach.
            OSError: a link cycle.
        """
        resolved = resolve_in_root(self.root, inner, follow_last=follow_last)
        inside = "/" + os.path.relpath(resolved, self.root) if resolved != self.root else "/"
        mount = _private_mount(inside)
        if mount is not None:
            via = "" if inside == inner else f" (through a link, it is {inside!r})"
            raise ValueError(
                f"file path {inner!r}{via} is on {mount}, a filesystem private to the sandbox's namespaces that "
                "the host cannot reach; use the working directory or another absolute path (or exec a command)"
            )
        return resolved, inside

    def absolute(self, checked: str) -> str:
        """A checked path as the sandbox names it: relative ones are in the working directory."""
        return checked if checked.startswith("/") else posixpath.join(self.workdir, checked)

    def inner(self, host: str) -> str:
        """The sandbox's name for a host path below :attr:`root`."""
        if host == self.root:
            return "/"
        return "/" + os.path.relpath(host, self.root)


def has_overlay_mounts(paths: Iterable[str]) -> list[str]:
    """The overlay mount points among ``/proc/self/mountinfo`` below any of ``paths`` (for tests and doctor)."""
    found = []
    prefixes = tuple(p.rstrip("/") + "/" for p in paths)
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "overlay" and fields[4].startswith(prefixes):
                found.append(fields[4])
    return found


# ---------------------------------------------------------------------- file access from the host


def _invalid(exc: Exception, sandbox_id: str | None) -> InvalidRequest:
    return InvalidRequest(str(exc), backend="subprocess", sandbox_id=sandbox_id)


def split_paths(paths: Iterable[str], sandbox_id: str | None) -> list[tuple[str, str]]:
    """Each path checked: ``(the caller's path normalised, relative or absolute)``.

    Raises:
        InvalidRequest: a path that :func:`sandboxkit.models.check_sandbox_path` refuses.
    """
    out = []
    for path in paths:
        try:
            out.append((path, check_sandbox_path(path, absolute_ok=True)))
        except ValueError as exc:
            raise _invalid(exc, sandbox_id) from None
    return out


def _rel_in_root(view: RootView, path: str, sandbox_id: str | None) -> str:
    try:
        resolved, _inside_path = view.host(path, follow_last=True)
    except (ValueError, OSError) as exc:
        raise _invalid(exc, sandbox_id) from None
    return os.path.relpath(resolved, view.root)


def write_files(view: RootView, workspace: Workspace, files: Mapping[str, bytes | str], sandbox_id: str | None) -> None:
    """Write files: relative ones in the working directory, absolute ones anywhere in the view.

    Both are resolved against the sandbox's root (a link in ``/testbed`` to ``/data`` means the
    image's ``/data``), so the host never follows a link to its own files.

    Raises:
        InvalidRequest: a bad path, one on a private mount, or text that is not valid Unicode.
        OSError: the sandbox's tmpfs is full.
    """
    del workspace  # relative paths resolve like absolute ones, from the working directory
    checked = split_paths(files, sandbox_id)
    placed = {_rel_in_root(view, view.absolute(norm), sandbox_id): files[given] for given, norm in checked}
    if placed:
        Workspace(view.root, view.owner, sandbox_id).write(placed)


def read_files(view: RootView, workspace: Workspace, paths: Sequence[str], sandbox_id: str | None) -> dict[str, bytes]:
    """Read regular files (relative or absolute); missing ones are absent. Keys: the normalised paths.

    Raises:
        InvalidRequest: a bad path or one on a private mount.
    """
    del workspace
    out: dict[str, bytes] = {}
    root = Workspace(view.root, view.owner, sandbox_id)
    for _given, norm in split_paths(paths, sandbox_id):
        rel = _rel_in_root(view, view.absolute(norm), sandbox_id)
        found = root.read([rel])
        if rel in found:
            out[norm] = found[rel]
    return out
