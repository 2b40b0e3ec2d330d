"""A checkpoint's archive as the engine's unpack can take it back: climbing links kept apart, holes kept, size bounded.

``get_archive`` gives the workspace as a tar stream; three things in it break a fork that unpacks
it with ``put_archive``, so the stream is rewritten on its way to the checkpoint's file:

* **Relative links that climb out of the workspace** (``l -> ../../etc/hostname``, legal and
  common in a repository) make the engine refuse the whole archive ("invalid symlink"). They are
  kept out of it and carried as data, ``(path, target)`` pairs the runner recreates after the
  unpack (its ``links`` op), with the same text. A hard link to one is carried the same way.
* **Sparse files** come dense (the engine's tar writer knows no holes), so a workspace holding
  one ``truncate -s 200M`` file used to cost 200 MB of host disk. Runs of zero blocks are
  skipped with a seek instead of written, so the file on the host is as sparse as the data, and
  each file's runs are remembered: the engine unpacks dense, and the runner then punches them
  out again (its ``holes`` op), so a fork's tmpfs (and memory) holds what the parent's did.
* **Size**: the engine unpacks dense, so a fork needs the sum of the regular files' sizes on its
  workspace tmpfs. An archive that cannot fit ``workdir_size_mb`` could never be forked; it is
  refused while it streams (:class:`CheckpointTooLarge`), before it costs the host that much.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

__all__ = ["CheckpointTooLarge", "Holes", "Link", "Rewritten", "hole_request", "link_blob", "rewrite_checkpoint"]

#: (path relative to the workspace, link text), as bytes: names need not be UTF-8.
Link = tuple[bytes, bytes]
#: (path relative to the workspace, [offset, length, offset, length, ...] of its runs of zeros).
Holes = tuple[bytes, list[int]]
_BLOCK = 4096
_ZERO = bytes(_BLOCK)
_COPY_BUFFER = 1 << 20
#: Runs of zeros remembered per checkpoint at most (past it, the rest of the files unpack dense).
_MAX_RUNS = 1 << 16


@dataclass
class Rewritten:
    """A checkpoint's archive as written: its length, and what the runner restores after the unpack."""

    length: int
    links: list[Link] = field(default_factory=list)
    holes: list[Holes] = field(default_factory=list)


class CheckpointTooLarge(Exception):
    """The workspace's files would need ``needed`` bytes unpacked, more than ``cap``."""

    def __init__(self, needed: int, cap: int) -> None:
        super().__init__(f"needs at least {needed} bytes unpacked, more than the workspace's {cap}")
        self.needed = needed
        self.cap = cap


class _ChunkReader(io.RawIOBase):
    """The engine's chunk iterator as a readable stream (what ``tarfile``'s stream mode reads)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class _SparseWriter:
    """Writes ``file`` leaving a hole wherever a whole aligned block is zeros (``finish`` sets the length).

    Zero blocks are found with ``bytes.find`` of a block of zeros, which skips through data that
    holds few zeros a block at a time, so dense data is written in one call per chunk.
    """

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._pos = file.tell()
        #: The holes left, as ``[start, end)`` offsets in the file, adjacent ones merged.
        self.holes: list[list[int]] = []

    def tell(self) -> int:
        return self._pos

    def write(self, data: bytes | bytearray | memoryview) -> int:
        raw = data if isinstance(data, bytes) else bytes(data)
        view = memoryview(raw)
        n, base = len(raw), self._pos
        done = search = 0  # written up to `done`; look for zeros from `search`
        while True:
            hit = raw.find(_ZERO, search)
            if hit < 0:
                break
            first = hit + (-(base + hit)) % _BLOCK  # the first block boundary at or after the run's start
            if first + _BLOCK > n:
                break
            if raw[first : first + _BLOCK] != _ZERO:
                search = first + 1  # a run long enough to hold a block starts after `first`
                continue
            end = first + _BLOCK
            while end + _BLOCK <= n and raw[end : end + _BLOCK] == _ZERO:
                end += _BLOCK
            self._file.write(view[done:first])
            self._file.seek(end - first, os.SEEK_CUR)
            if self.holes and self.holes[-1][1] == base + first:
                self.holes[-1][1] = base + end
            else:
                self.holes.append([base + first, base + end])
            done = search = end
        self._file.write(view[done:])
        self._pos = base + n
        return n

    def flush(self) -> None:
        self._file.flush()

    def finish(self) -> int:
        """Make the file end where the data ends (a trailing hole has no bytes written); its length."""
        self._file.truncate(self._pos)
        self._file.seek(self._pos)
        self._file.flush()
        return self._pos


def _climbs_out(member: tarfile.TarInfo, workdir: str) -> bool:
    """Whether the engine would refuse this symlink: its relative target, from its directory, leaves ``workdir``."""
    if member.linkname.startswith("/"):
        return False  # the engine joins an absolute target onto the link's directory: always inside
    where = posixpath.normpath(posixpath.join(workdir, posixpath.dirname(member.name), member.linkname))
    return not (where == workdir or where.startswith(workdir.rstrip("/") + "/"))


def _relative(name: str) -> bytes:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts).encode("utf-8", "surrogateescape")


def _runs_in(holes: list[list[int]], start: int, size: int) -> list[int]:
    """The holes within a member's data at ``start`` (``size`` bytes), as flat ``offset, length`` pairs in it."""
    flat: list[int] = []
    for first, end in holes:
        first, end = max(first, start), min(end, start + size)
        if end - first >= _BLOCK:
            flat += [first - start, end - first]
    return flat


def rewrite_checkpoint(chunks: Iterable[bytes], out: IO[bytes], workdir: str, cap: int) -> Rewritten:
    """Copy the engine's tar stream of ``workdir`` into ``out``, as the module docstring says.

    Raises:
        CheckpointTooLarge: the regular files' sizes add up to more than ``cap`` bytes.
        tarfile.TarError: the engine sent something that is not a tar stream.
    """
    workdir = posixpath.normpath(workdir)
    done = Rewritten(0)
    links = done.links
    apart: dict[str, bytes] = {}  # names of the climbing links (as the archive writes them) -> text
    needed = remembered = 0
    sink = _SparseWriter(out)
    with (
        tarfile.open(fileobj=_ChunkReader(chunks), mode="r|", errors="surrogateescape") as source,
        tarfile.TarFile(
            fileobj=sink,  # type: ignore[arg-type]
            mode="w",
            format=tarfile.PAX_FORMAT,
            errors="surrogateescape",
            copybufsize=_COPY_BUFFER,
        ) as dest,
    ):
        for member in source:
            if member.issym() and _climbs_out(member, workdir):
                apart[posixpath.normpath(member.name)] = member.linkname.encode("utf-8", "surrogateescape")
                links.append((_relative(member.name), apart[posixpath.normpath(member.name)]))
                continue
            if member.islnk() and posixpath.normpath(member.linkname) in apart:
                links.append((_relative(member.name), apart[posixpath.normpath(member.linkname)]))
                continue
            if not member.isreg():
                dest.addfile(member)
                continue
            needed += member.size
            if needed > cap:
                raise CheckpointTooLarge(needed, cap)
            seen = len(sink.holes)
            dest.addfile(member, source.extractfile(member))
            if member.size >= _BLOCK and len(sink.holes) > seen and remembered < _MAX_RUNS:
                start = sink.tell() - -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE  # data, then padding
                runs = _runs_in(sink.holes[seen:], start, member.size)
                if runs:
                    done.holes.append((_relative(member.name), runs))
                    remembered += len(runs) // 2
    done.length = sink.finish()
    return done


def link_blob(links: list[Link]) -> bytes:
    """The runner's ``links`` request body: ``path NUL target NUL`` for each link."""
    return b"".join(path + b"\0" + target + b"\0" for path, target in links)


def hole_request(holes: list[Holes]) -> tuple[list[list[int]], bytes]:
    """The runner's ``holes`` request: each file's runs (JSON header) and ``path NUL`` for each (blob)."""
    return [runs for _path, runs in holes], b"".join(path + b"\0" for path, _runs in holes)
