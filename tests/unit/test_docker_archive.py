"""The Docker checkpoint archive rewrite (``backends.docker._archive``), on tar streams built here.

The engine-backed behaviour (forks that get their links back, a host file with holes) is in
``tests/backends/docker/test_docker_fork_archive.py``; this pins the rewrite itself: every member
comes out as it went in, zero blocks become holes wherever they fall relative to the chunks,
climbing links are set apart, and the size bound stops the copy.
"""

from __future__ import annotations

import io
import os
import random
import tarfile
import tempfile

import pytest

from sandboxkit.backends.docker._archive import CheckpointTooLarge, link_blob, rewrite_checkpoint


def _tar(members: list[tuple[str, bytes, str | bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                assert isinstance(payload, bytes)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                assert isinstance(payload, str)
                info.linkname = payload
                tar.addfile(info)
    return buf.getvalue()


def _chunks(raw: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(raw):
        step = rng.choice([1, 511, 4096, 5000, 1 << 16, 1 << 20])
        out.append(raw[i : i + step])
        i += step
    return out


def _contents(file: io.BufferedRandom) -> dict[str, tuple[bytes, bytes | str]]:
    file.seek(0)
    with tarfile.open(fileobj=file, mode="r:") as tar:
        return {
            m.name: (m.type, tar.extractfile(m).read() if m.isreg() else m.linkname)  # type: ignore[union-attr]
            for m in tar
        }


@pytest.mark.parametrize("seed", range(4))
def test_every_member_comes_through_and_zero_blocks_become_holes(seed: int) -> None:
    rng = random.Random(seed)
    zeros = bytes(8 << 20)
    mixed = rng.randbytes(3000) + bytes(20_000) + rng.randbytes(10) + bytes(4095) + b"x" + bytes(9000)
    members = [
        ("./", tarfile.DIRTYPE, ""),
        ("./sparse", tarfile.REGTYPE, zeros + b"end"),
        ("./mixed", tarfile.REGTYPE, mixed),
        ("./dense", tarfile.REGTYPE, rng.randbytes(300_000)),
        ("./empty", tarfile.REGTYPE, b""),
        ("./d", tarfile.DIRTYPE, ""),
        ("./d/in", tarfile.SYMTYPE, "../dense"),
        ("./d/abs", tarfile.SYMTYPE, "/etc/passwd"),
        ("./hard", tarfile.LNKTYPE, "./dense"),
    ]
    raw = _tar(members)  # type: ignore[arg-type]
    with tempfile.TemporaryFile() as out:
        done = rewrite_checkpoint(_chunks(raw, seed), out, "/work", 1 << 30)
        assert done.links == [] and done.length == os.fstat(out.fileno()).st_size
        assert os.fstat(out.fileno()).st_blocks * 512 < 1 << 20  # the 8 MB of zeros take no disk
        got = _contents(out)  # type: ignore[arg-type]
    expected = {name.rstrip("/") or ".": (kind, payload) for name, kind, payload in members}
    assert {name.rstrip("/") or ".": value for name, value in got.items()} == expected
    # The runs a fork punches out again: zeros of that file only, most of the sparse one.
    data = {name.encode(): payload for name, kind, payload in members if kind == tarfile.REGTYPE}
    punched = {path: runs for path, runs in done.holes}
    for path, runs in punched.items():
        content = data[b"./" + path]
        assert isinstance(content, bytes)
        for off, length in zip(runs[::2], runs[1::2], strict=True):
            assert length >= 4096 and content[off : off + length] == bytes(length), (path, off, length)
    assert sum(punched[b"sparse"][1::2]) > 7 << 20 and b"dense" not in punched


def test_links_that_climb_out_are_set_apart_with_their_hard_links() -> None:
    raw = _tar(
        [
            ("./up", tarfile.SYMTYPE, "../../etc/hostname"),
            ("./a/b/root", tarfile.SYMTYPE, "../../.."),
            ("./a/b/top", tarfile.SYMTYPE, "../.."),  # the workspace itself: fine
            ("./same-up", tarfile.LNKTYPE, "./up"),
            ("./f", tarfile.REGTYPE, b"f"),
        ]
    )
    with tempfile.TemporaryFile() as out:
        links = rewrite_checkpoint([raw], out, "/work", 1 << 30).links
        names = set(_contents(out))  # type: ignore[arg-type]
    assert links == [(b"up", b"../../etc/hostname"), (b"a/b/root", b"../../.."), (b"same-up", b"../../etc/hostname")]
    assert names == {"./a/b/top", "./f"}
    assert link_blob(links[:1]) == b"up\0../../etc/hostname\0"


def test_the_copy_stops_once_the_files_exceed_the_cap() -> None:
    raw = _tar([(f"./f{i}", tarfile.REGTYPE, bytes(1 << 20)) for i in range(8)])
    with tempfile.TemporaryFile() as out, pytest.raises(CheckpointTooLarge) as caught:
        rewrite_checkpoint([raw], out, "/work", 3 << 20)
    assert (caught.value.needed, caught.value.cap) == (4 << 20, 3 << 20)
