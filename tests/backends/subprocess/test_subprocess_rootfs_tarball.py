"""Unpacking an image tarball: a crafted archive never writes, chmods or chowns anything outside the cache.

Each archive below reuses a name: a link member first, then a file, hard link or directory of
the same name. An unpacker that opens the later member's path follows the earlier link (the
stdlib's ``open(path, "wb")`` and ``os.chmod(path)`` do), which would write a host file as root.
The victim is a host file (or directory) the test owns; it must come out byte-for-byte, mode and
owner unchanged, and the image must hold what the archive meant (the later member, never a link
into the host).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from sandboxkit.backends.subprocess._rootfs import ROOTFS_UID, load_image

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="unpacking chowns to the image uid: root only")


def _tarball(path: Path, members: list[tuple[str, bytes, dict[str, object]]]) -> str:
    """Write ``(name, type, attributes)`` members (regular ones carry ``data``) as a tar at ``path``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, attrs in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            data = attrs.pop("data", b"") if kind == tarfile.REGTYPE else b""
            assert isinstance(data, bytes)
            info.size = len(data)
            info.mode = 0o644
            for key, value in attrs.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    path.write_bytes(buf.getvalue())
    return str(path)


def _fingerprint(path: Path) -> tuple[bytes | None, int, int, int]:
    st = path.lstat()
    return (path.read_bytes() if path.is_file() else None, st.st_mode, st.st_uid, st.st_nlink)


def _victims(tmp_path: Path) -> tuple[Path, Path]:
    host = tmp_path / "host"
    host.mkdir()
    victim = host / "victim.txt"
    victim.write_bytes(b"host secret\n")
    victim.chmod(0o600)
    return victim, host


@pytest.mark.parametrize(
    "later",
    [
        pytest.param((tarfile.REGTYPE, {"data": b"pwned\n", "mode": 0o777}), id="regular-file"),
        pytest.param((tarfile.LNKTYPE, {"linkname": "etc/ok.txt"}), id="hard-link"),
        pytest.param((tarfile.DIRTYPE, {"mode": 0o777}), id="directory"),
    ],
)
def test_a_member_named_like_an_earlier_symlink_never_writes_through_it(
    tmp_path: Path, later: tuple[bytes, dict[str, object]]
) -> None:
    victim, _host = _victims(tmp_path)
    before = _fingerprint(victim)
    kind, attrs = later
    tarball = _tarball(
        tmp_path / "image.tar",
        [
            ("etc", tarfile.DIRTYPE, {"mode": 0o755}),
            ("etc/ok.txt", tarfile.REGTYPE, {"data": b"ok\n"}),
            ("evil", tarfile.SYMTYPE, {"linkname": str(victim)}),
            ("evil", kind, dict(attrs)),
        ],
    )
    image = load_image(tarball, str(tmp_path / "cache"))
    assert _fingerprint(victim) == before  # not written, chmodded, chowned or hard-linked
    root = Path(image.path)
    evil = root / "evil"
    assert not evil.is_symlink()  # the later member replaced the link, as tar does
    if kind == tarfile.REGTYPE:
        assert evil.read_bytes() == b"pwned\n" and evil.stat().st_uid == ROOTFS_UID
    elif kind == tarfile.LNKTYPE:
        assert evil.read_bytes() == b"ok\n" and evil.stat().st_ino == (root / "etc" / "ok.txt").stat().st_ino
    else:
        assert evil.is_dir()


def test_a_later_member_never_follows_a_link_that_stays_inside_the_image(tmp_path: Path) -> None:
    tarball = _tarball(
        tmp_path / "image.tar",
        [
            ("etc", tarfile.DIRTYPE, {"mode": 0o755}),
            ("etc/passwd", tarfile.REGTYPE, {"data": b"root:x:0:0::/root:/bin/sh\n"}),
            ("alias", tarfile.SYMTYPE, {"linkname": "etc/passwd"}),
            ("alias", tarfile.REGTYPE, {"data": b"replaced\n"}),
            ("etcdir", tarfile.SYMTYPE, {"linkname": "etc"}),
            ("etcdir/planted", tarfile.REGTYPE, {"data": b"through a link\n"}),
        ],
    )
    root = Path(load_image(tarball, str(tmp_path / "cache")).path)
    assert (root / "etc" / "passwd").read_bytes() == b"root:x:0:0::/root:/bin/sh\n"
    assert (root / "alias").read_bytes() == b"replaced\n"
    assert not (root / "etc" / "planted").exists()  # a member's directory is never reached through a link


def test_a_hard_link_to_a_symlink_links_the_symlink_never_its_host_target(tmp_path: Path) -> None:
    victim, host = _victims(tmp_path)
    before = _fingerprint(victim)
    tarball = _tarball(
        tmp_path / "image.tar",
        [
            ("out", tarfile.SYMTYPE, {"linkname": str(victim)}),
            ("hard", tarfile.LNKTYPE, {"linkname": "out"}),
            ("hard", tarfile.REGTYPE, {"data": b"pwned\n"}),
            ("hostdir", tarfile.SYMTYPE, {"linkname": str(host)}),
            ("hostdir/new.txt", tarfile.REGTYPE, {"data": b"pwned\n"}),
        ],
    )
    root = Path(load_image(tarball, str(tmp_path / "cache")).path)
    assert _fingerprint(victim) == before
    assert sorted(p.name for p in host.iterdir()) == ["victim.txt"]
    assert (root / "hard").read_bytes() == b"pwned\n"
    assert os.readlink(root / "out") == str(victim)  # kept as written: resolved inside the sandbox only


def test_an_unpacked_image_keeps_modes_times_and_links(tmp_path: Path) -> None:
    tarball = _tarball(
        tmp_path / "image.tar",
        [
            ("usr/bin", tarfile.DIRTYPE, {"mode": 0o755, "mtime": 1_600_000_000}),
            ("usr/bin/tool", tarfile.REGTYPE, {"data": b"#!/bin/sh\n", "mode": 0o6755, "mtime": 1_500_000_000}),
            ("usr/bin/same", tarfile.LNKTYPE, {"linkname": "usr/bin/tool"}),
            ("bin", tarfile.SYMTYPE, {"linkname": "usr/bin", "mtime": 1_400_000_000}),
            ("private", tarfile.DIRTYPE, {"mode": 0o000}),
        ],
    )
    root = Path(load_image(tarball, str(tmp_path / "cache")).path)
    tool = (root / "usr" / "bin" / "tool").stat()
    assert tool.st_mode & 0o7777 == 0o755  # set-id bits dropped
    assert (tool.st_uid, tool.st_gid, int(tool.st_mtime)) == (ROOTFS_UID, ROOTFS_UID, 1_500_000_000)
    assert (root / "usr" / "bin" / "same").stat().st_ino == tool.st_ino
    assert int((root / "usr" / "bin").stat().st_mtime) == 1_600_000_000  # set after its entries were made
    link = (root / "bin").lstat()
    assert (os.readlink(root / "bin"), link.st_uid, int(link.st_mtime)) == ("usr/bin", ROOTFS_UID, 1_400_000_000)
    assert (root / "usr").stat().st_uid == ROOTFS_UID  # a parent the archive did not list
    assert (root / "private").stat().st_mode & 0o777 == 0o700  # directories stay traversable by their owner
