"""The agent's final workspace, carried out of its sandbox into a fresh one where the verifier runs.

Why a fresh sandbox: in the agent's own sandbox everything the verifier relies on is the
agent's to change. It is root in its image on a root-filesystem backend, so it can plant
``/tests/json.py`` (imported by the task's checker before the standard library), put a
``python3`` ahead of the image's on ``PATH``, make ``/tests`` a link or ``/logs/verifier`` a
file; and a process it leaves behind (a kernel thread, a daemon) can rewrite the verdict
while ``test.sh`` runs. A fresh sandbox of the same pool is the task's image untouched, with
no process of the agent's in it; what crosses over is only the answer, the working directory.

How the workspace crosses, and why each step is safe:

* the agent's sandbox archives its working directory with its own ``tar`` (cut into parts with
  its ``dd``, under the sandbox's file size limit) into files that the host reads back with the backend's file API (which never follows a link out of the
  sandbox). The agent controls that ``tar``, so the archive is data it chose, exactly as the
  workspace is; nothing it says is executed;
* the host parses the archive (:func:`parse_archive`) and keeps regular files, directories and
  links whose names stay inside the working directory; an entry below a file or a link (the
  shape of a "write through the link" archive) is dropped, and so is a link that resolves,
  through the archive's other links, into the verifier's own files (``/tests``, ``/logs``,
  ``/solution``) or into ``/proc``, ``/sys``, ``/dev`` (which lead back there);
* the fresh sandbox gets the kept directories and files as a tar built on the host (no links in
  it), unpacked by the *image's* ``tar``; then the image's shell sets modes (setuid/setgid
  dropped) and creates the links last, so nothing is ever written through a link the agent made.

What does not cross: changes outside the working directory (packages the agent installed,
files under ``/etc``) and running processes. A Harbor task that grades the machine's state
rather than files in its working directory needs the agent's sandbox itself, and that is the
one thing a verifier out of the agent's reach cannot have.
"""

from __future__ import annotations

import io
import posixpath
import shlex
import stat
import tarfile
from dataclasses import dataclass, field

from sandboxkit.errors import InvalidRequest
from sandboxkit.session import Session

__all__ = [
    "ARCHIVE",
    "GUARDED_ROOTS",
    "MAX_WORKSPACE_BYTES",
    "WorkspaceCopy",
    "WorkspaceUnreadable",
    "capture_workspace",
    "parse_archive",
    "restore_workspace",
]

#: Where the fresh sandbox gets the host-built archive's parts (its /logs/verifier is emptied before test.sh).
RESTORE = "/logs/verifier/.sandboxkit-restore.tar"
#: Where the agent's sandbox leaves the archive's parts (``.0``, ``.1``...): a directory every Harbor sandbox may write.
ARCHIVE = "/logs/verifier/.sandboxkit-workspace.tar"
#: The largest workspace archive carried over; a bigger one is the agent's doing and scores 0.
MAX_WORKSPACE_BYTES = 512 << 20
#: A carried link may not resolve below these: the verifier's files, and kernel views that reach them.
GUARDED_ROOTS = ("/tests", "/logs", "/solution", "/proc", "/sys", "/dev")
#: Seconds archiving or restoring a workspace may take (in the sandbox).
STEP_TIMEOUT_S = 300.0
_LINK_HOPS = 40  # the kernel's own limit on links in one path
_NAME_MAX = 255  # bytes in one path component
_FILE_MODE, _DIR_MODE = 0o644, 0o755  # what the file API creates; other modes are set by the script


class WorkspaceUnreadable(Exception):
    """The agent's sandbox gave no usable archive of its working directory (the agent can cause this)."""


@dataclass
class WorkspaceCopy:
    """A working directory as parsed from the agent's archive, ready to be restored elsewhere.

    Attributes:
        root: the working directory (absolute).
        files: absolute path -> content of each regular file.
        dirs: every directory below ``root``, parents first.
        modes: absolute path -> permission bits, where they differ from what the file API creates.
        links: absolute path -> target of each link kept.
        dropped: ``"name: why"`` for each entry left out.
    """

    root: str
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    modes: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def _quote(path: str) -> str:
    return shlex.quote(path)


async def capture_workspace(session: Session, workdir: str) -> WorkspaceCopy:
    """Archive ``workdir`` in ``session``'s sandbox and parse it (the sandbox is left as it was, less the archive).

    The archive is cut into parts of at most half the sandbox's file size limit (``dd``), so a
    workspace of many files, each under that limit, is carried whole.

    Raises:
        WorkspaceUnreadable: no archive came back, it is too large or it is not a tar archive.
        SandboxError: the sandbox failed.
    """
    # /logs/verifier is scratch space here: the verifier writes into the fresh sandbox's, not this one.
    folder = posixpath.dirname(ARCHIVE)
    part_mb = _part_bytes(session) >> 20
    max_parts = MAX_WORKSPACE_BYTES // (part_mb << 20) + 1
    part = f"{ARCHIVE}.$i"
    script = (
        f"chmod -R u+rwX {folder} 2>/dev/null; rm -rf {folder} 2>/dev/null; mkdir -p {folder}; rm -f {ARCHIVE}.*; "
        f"tar -C {_quote(workdir)} -cf - . 2>/dev/null | {{ i=0; while [ $i -le {max_parts} ]; do "
        f"dd of={part} bs=1048576 count={part_mb} iflag=fullblock 2>/dev/null; "
        f'[ -s {part} ] || {{ rm -f {part}; break; }}; echo "{part} $(wc -c < {part})"; i=$((i+1)); done; '
        "cat >/dev/null; }"
    )
    made = await session.exec(script, timeout_s=STEP_TIMEOUT_S)
    # The listing is the agent's shell's output: only the count and sizes are taken from it, never a path.
    sizes = [line.rsplit(" ", 1)[-1] for line in made.stdout.splitlines() if line.startswith(ARCHIVE)]
    if not sizes or not all(size.isdigit() for size in sizes):
        raise WorkspaceUnreadable(
            f"archiving {workdir} in the agent's sandbox gave nothing ({made.status.value}, exit {made.exit_code}): "
            f"{(made.stderr or made.stdout)[-300:]!r}"
        )
    if len(sizes) > max_parts or sum(int(size) for size in sizes) > MAX_WORKSPACE_BYTES:
        raise WorkspaceUnreadable(f"the workspace archive is over {MAX_WORKSPACE_BYTES} bytes")
    data = bytearray()
    for index in range(len(sizes)):  # one part at a time: the host holds the archive once, not twice
        name = f"{ARCHIVE}.{index}"
        try:
            body = (await session.read_files([name])).get(name)
        except InvalidRequest as exc:  # the agent's processes made the part a link to a private mount
            raise WorkspaceUnreadable(f"the workspace archive part {name} could not be read: {exc.message}") from exc
        if body is None or len(data) + len(body) > MAX_WORKSPACE_BYTES:
            raise WorkspaceUnreadable(f"the workspace archive part {name} could not be read back")
        data += body
    await session.exec(f"rm -f {ARCHIVE}.*", timeout_s=STEP_TIMEOUT_S)
    return parse_archive(bytes(data), workdir)


def _clean(name: str) -> str | None:
    """A member name as a relative path inside the archive's root, or None when it leaves it."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts or name.startswith("/"):
        return None
    try:
        if any(len(part.encode("utf-8")) > _NAME_MAX for part in parts):
            return None  # no file system holds it: only a crafted archive has one
    except UnicodeEncodeError:  # a name the file APIs cannot carry (tarfile kept its bytes as surrogates)
        return None
    return "/".join(parts)


def parse_archive(data: bytes, workdir: str) -> WorkspaceCopy:
    """The entries of an (untrusted) tar of ``workdir`` that may be recreated there; see the module docstring.

    Raises:
        WorkspaceUnreadable: ``data`` is not a tar archive.
    """
    kinds: dict[str, tuple[str, tarfile.TarInfo, bytes]] = {}
    copy = WorkspaceCopy(root=workdir)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                rel = _clean(member.name)
                if rel is None:
                    copy.dropped.append(f"{member.name!r}: outside the working directory")
                    continue
                if not rel:
                    continue  # the directory itself
                if member.isdir():
                    kinds[rel] = ("dir", member, b"")
                elif member.isreg():
                    stream = tar.extractfile(member)
                    kinds[rel] = ("file", member, stream.read() if stream is not None else b"")
                elif member.issym():
                    kinds[rel] = ("link", member, b"")
                elif member.islnk() and (target := _clean(member.linkname)) and kinds.get(target, ("",))[0] == "file":
                    kinds[rel] = ("file", kinds[target][1], kinds[target][2])  # a hard link shares its inode's mode
                else:
                    copy.dropped.append(f"{rel!r}: not a file, directory or link")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise WorkspaceUnreadable(f"the workspace archive is not a tar archive: {exc}") from exc
    links = {posixpath.join(workdir, rel): m.linkname for rel, (kind, m, _) in kinds.items() if kind == "link"}
    for rel in sorted(kinds, key=lambda r: (r.count("/"), r)):
        kind, member, body = kinds[rel]
        parent = posixpath.dirname(rel)
        if parent and (parent not in kinds or kinds[parent][0] != "dir"):
            copy.dropped.append(f"{rel!r}: below an entry that is not a directory")
            kinds[rel] = ("dropped", member, b"")  # and so is everything below it
            continue
        path = posixpath.join(workdir, rel)
        mode = stat.S_IMODE(member.mode) & 0o1777  # setuid/setgid mean nothing to the verifier
        if kind == "dir":
            copy.dirs.append(path)
            if mode != _DIR_MODE:
                copy.modes[path] = mode
        elif kind == "file":
            copy.files[path] = body
            if mode != _FILE_MODE:
                copy.modes[path] = mode
        elif kind == "link":
            landing = resolve_lexically(path, member.linkname, links)
            if landing is None or any(landing == g or landing.startswith(g + "/") for g in GUARDED_ROOTS):
                copy.dropped.append(f"{rel!r}: a link into {landing or 'a loop'}, the verifier's side")
                kinds[rel] = ("dropped", member, b"")
            else:
                copy.links[path] = member.linkname
    return copy


def resolve_lexically(link: str, target: str, links: dict[str, str]) -> str | None:
    """Where ``link -> target`` leads, following the workspace's own ``links`` as the kernel would.

    Components are taken one at a time (``..`` after a link is the link target's parent, as in
    the kernel); paths outside the workspace are taken as they are (the image's own links do not
    lead to the verifier's files). Returns None for a loop.
    """
    pending = [p for p in target.split("/") if p]
    current = "/" if target.startswith("/") else posixpath.dirname(link)
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = posixpath.dirname(current)
            continue
        candidate = posixpath.join(current, part)
        if candidate in links:
            hops += 1
            if hops > _LINK_HOPS:
                return None
            found = links[candidate]
            pending = [p for p in found.split("/") if p] + pending
            current = "/" if found.startswith("/") else current
            continue
        current = candidate
    return current


def _part_bytes(session: Session) -> int:
    """Size of one archive part: half the sandbox's file size limit, at most 32 MiB."""
    size_mb = session.limits.file_size_mb
    return (max(1, min(32, size_mb // 2)) if size_mb else 32) << 20


def _pack(copy: WorkspaceCopy) -> bytes:
    """The copy's directories and regular files as a tar built here (no links: they are made last, apart)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in copy.dirs:
            info = tarfile.TarInfo("./" + posixpath.relpath(path, copy.root))
            info.type, info.mode = tarfile.DIRTYPE, _DIR_MODE  # a directory's own mode is set last
            tar.addfile(info)
        for path, body in copy.files.items():
            info = tarfile.TarInfo("./" + posixpath.relpath(path, copy.root))
            info.size, info.mode = len(body), copy.modes.get(path, _FILE_MODE)
            tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


async def restore_workspace(session: Session, copy: WorkspaceCopy) -> None:
    """Replace the working directory of ``session``'s (fresh) sandbox with ``copy``.

    Directories and files travel as one tar built on the host (no links in it), written in
    parts through the file API and unpacked by the image's own ``tar``: a file API call per
    directory cost the Docker engine ~0.1 s each, so 2,000 directories took minutes. Then one
    script run by
    the image's shell sets modes and creates the links, links last so nothing is written
    through them.

    Raises:
        SandboxError: the sandbox failed.
    """
    root = _quote(copy.root)
    folder = posixpath.dirname(RESTORE)
    await session.exec(
        f"mkdir -p {root} {folder}; rm -rf {root}/* {root}/.[!.]* {root}/..?* {RESTORE}.* 2>/dev/null; true",
        timeout_s=STEP_TIMEOUT_S,
    )
    packed, step = _pack(copy), _part_bytes(session)
    parts = {f"{RESTORE}.{i}": packed[at : at + step] for i, at in enumerate(range(0, len(packed), step))}
    await session.write_files(parts)
    names = " ".join(parts)
    # tar's own errors are not checked: what it may not overwrite (the image's files in root-owned
    # directories on Docker) the agent could not have changed either. The image has a tar: the
    # agent's sandbox, the same image, just made the archive with it.
    await session.exec(f"cat {names} | tar -x -f - -C {root} 2>/dev/null; rm -f {names}", timeout_s=STEP_TIMEOUT_S)
    dirs = set(copy.dirs)
    lines: list[str] = []
    lines += [f"chmod {mode:o} {_quote(path)}" for path, mode in copy.modes.items() if path not in dirs]
    lines += [f"ln -s -- {_quote(target)} {_quote(path)}" for path, target in copy.links.items()]
    # Directories' modes last (deepest first): one the agent left unwritable must not stop what goes inside.
    lines += [f"chmod {copy.modes[d]:o} {_quote(d)}" for d in reversed(copy.dirs) if d in copy.modes]
    if lines:
        # Each line on its own: a mode the image's chmod refuses must not stop the links.
        await session.exec("sh", stdin="\n".join(lines) + "\n", timeout_s=STEP_TIMEOUT_S)
