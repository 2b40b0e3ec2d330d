"""The subprocess backend on an image root filesystem: real, private absolute paths on a copy-on-write view.

A busybox-only directory image (no python3: every command starts cold) covers the filesystem
rules; the project's base image, exported by Docker, covers the warm fork server inside an image.
One backend per image per module keeps this cheap; sandboxes are opened per test.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._rootfs import ROOTFS_UID, has_overlay_mounts, load_image, resolve_in_root
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits, RunRequest, Status
from support.marks import missing
from support.rootfs import CACHE, IMAGE_HOSTNAME, base_image_tarball, busybox_rootfs

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="rootfs sandboxes mount an overlay per sandbox: root only"),
]
FAST = Limits(timeout_s=10.0, output_bytes=1 << 16)
VERIFIER = """#!/bin/sh
# A Harbor-style verifier: the reward goes where the evaluator reads it.
mkdir -p /logs/verifier
if [ "$(cat /testbed/answer.txt)" = "42" ]; then echo 1.0 > /logs/verifier/reward.txt; else echo 0.0 > /logs/verifier/reward.txt; fi
"""


def _needs_busybox() -> str:
    image = busybox_rootfs()
    if image is None:
        missing("no static busybox here: apt-get install busybox-static (scripts/bootstrap.sh --all)")
    return image


@pytest.fixture(scope="module")
def private_root() -> Iterator[str]:
    """A workspace root of this module's own, so mount counts and cleanup see nobody else's sandboxes."""
    path = tempfile.mkdtemp(prefix=f"sandboxkit-rootfs-test-p{os.getpid()}-")
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        assert has_overlay_mounts([path]) == []
        shutil.rmtree(path, ignore_errors=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tiny(private_root: str) -> AsyncIterator[SubprocessBackend]:
    backend = SubprocessBackend(rootfs=_needs_busybox(), rootfs_cache=CACHE, root=private_root)
    try:
        yield backend
    finally:
        await backend.aclose()
        assert has_overlay_mounts([backend.root]) == []


async def _reward(sb: object, answer: str) -> float:
    await sb.write_files({"/testbed/answer.txt": answer})  # type: ignore[attr-defined]
    result = await sb.exec("sh /tests/test.sh")  # type: ignore[attr-defined]
    assert result.status is Status.OK, result
    found = await sb.read_files(["/logs/verifier/reward.txt"])  # type: ignore[attr-defined]
    return float(found["/logs/verifier/reward.txt"])


async def test_a_program_opens_absolute_paths_the_host_wrote(tiny: SubprocessBackend) -> None:
    async with _open(tiny) as sb:
        await sb.write_files({"/testbed/x.txt": "from the host", "/data/deep/y.txt": "y"})
        result = await sb.exec("cat /testbed/x.txt; echo; cat /data/deep/y.txt; pwd; id -u")
        assert result.status is Status.OK, result
        assert result.stdout == "from the host\ny/testbed\n0\n"
        assert await sb.read_files(["/testbed/x.txt", "x.txt"]) == {
            "/testbed/x.txt": b"from the host",
            "x.txt": b"from the host",
        }


async def test_tests_script_writes_the_reward_the_evaluator_reads(tiny: SubprocessBackend) -> None:
    async with _open(tiny) as sb:
        await sb.write_files({"/tests/test.sh": VERIFIER})
        assert await _reward(sb, "42") == 1.0
        assert await _reward(sb, "41") == 0.0


async def test_writes_touch_neither_the_image_nor_a_sibling(tiny: SubprocessBackend) -> None:
    assert tiny.rootfs is not None
    baked = Path(tiny.rootfs.path, "testbed", "x.txt")
    async with _open(tiny) as one, _open(tiny) as two:
        await one.exec("echo changed > /testbed/x.txt; echo new > /etc/new; rm /etc/hostname")
        assert (await one.read_files(["/testbed/x.txt"]))["/testbed/x.txt"] == b"changed\n"
        other = await two.exec("cat /testbed/x.txt /etc/hostname; ls /etc")
        assert other.stdout == f"baked into the image\n{IMAGE_HOSTNAME}\nhostname\npasswd\n", other
    assert baked.read_text() == "baked into the image\n"
    assert not Path(tiny.rootfs.path, "etc", "new").exists()


async def test_reset_discards_every_change(tiny: SubprocessBackend) -> None:
    async with _open(tiny) as sb:
        await sb.exec("echo changed > /testbed/x.txt; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt")
        assert await sb.reset()
        after = await sb.exec("cat /testbed/x.txt; ls /logs; ls -d /tests")
        assert after.stdout == "baked into the image\n/tests\n", after


async def test_image_is_root_and_unpacked_once(tiny: SubprocessBackend) -> None:
    assert tiny.rootfs is not None
    assert os.stat(Path(tiny.rootfs.path, "testbed", "x.txt")).st_uid == ROOTFS_UID
    again = SubprocessBackend(rootfs=_needs_busybox(), rootfs_cache=CACHE)
    assert again.rootfs is not None and again.rootfs.path == tiny.rootfs.path
    assert tiny.capabilities.absolute_paths
    assert tiny.rootfs.python_ok in (None, False)  # busybox has no python3: commands start cold


async def test_symlinks_resolve_inside_the_sandbox_never_on_the_host(tiny: SubprocessBackend) -> None:
    host_hostname = Path("/etc/hostname").read_bytes() if Path("/etc/hostname").exists() else b""
    async with _open(tiny) as sb:
        await sb.exec(
            "ln -s /etc /testbed/etc-link; ln -s ../../../../../etc/hostname /testbed/up; ln -s /proc /testbed/p"
        )
        got = await sb.read_files(["/testbed/etc-link/hostname", "/testbed/up"])
        assert got == {
            "/testbed/etc-link/hostname": f"{IMAGE_HOSTNAME}\n".encode(),
            "/testbed/up": f"{IMAGE_HOSTNAME}\n".encode(),
        }
        assert host_hostname != f"{IMAGE_HOSTNAME}\n".encode()
        # Writing through a link lands in the sandbox's /etc, not the host's.
        await sb.write_files({"/testbed/etc-link/planted": "x"})
        assert not Path("/etc/planted").exists()
        assert (await sb.exec("cat /etc/planted")).stdout == "x"
        # Relative paths start in the working directory and resolve the same way.
        assert await sb.read_files(["etc-link/hostname"]) == {"etc-link/hostname": f"{IMAGE_HOSTNAME}\n".encode()}
        assert (await sb.exec("cat hostname", cwd="etc-link")).stdout == f"{IMAGE_HOSTNAME}\n"
        with pytest.raises(InvalidRequest, match="private"):
            await sb.read_files(["/testbed/p/self/environ"])


async def test_a_working_directory_replaced_by_a_link_is_never_followed_by_the_host(tiny: SubprocessBackend) -> None:
    async with _open(tiny) as sb:
        for sabotage in (
            "rm -rf /testbed && ln -s /etc /testbed",
            "rm -rf /testbed",
            "rm -rf /testbed; echo f > /testbed",
        ):
            assert (await sb.exec(sabotage, cwd="/")).status is Status.OK
            await sb.write_files({"planted.txt": "x"})
            assert not Path("/etc/planted.txt").exists()
            assert (await sb.exec("cat planted.txt; pwd")).stdout == "x/testbed\n"
            assert await sb.read_files(["planted.txt"]) == {"planted.txt": b"x"}
            assert (await sb.exec("ls /etc")).stdout == "hostname\npasswd\n"
        await sb.exec("rm -rf /testbed", cwd="/")
        assert await sb.alive()  # still usable: the next call makes /testbed again


@pytest.mark.parametrize(
    "bad", ["../x", "/testbed/../etc/passwd", "/a/../../b", "/", "/tmp/x", "/proc/1/environ", "/dev/null", "a\x00"]
)
async def test_escapes_and_private_mounts_are_invalid(tiny: SubprocessBackend, bad: str) -> None:
    async with _open(tiny) as sb:
        with pytest.raises(InvalidRequest):
            await sb.write_files({bad: "x"})
        with pytest.raises(InvalidRequest):
            await sb.read_files([bad])


async def test_absolute_cwd(tiny: SubprocessBackend) -> None:
    async with _open(tiny) as sb:
        assert (await sb.exec("pwd", cwd="/")).stdout == "/\n"
        assert (await sb.exec("pwd", cwd="/tests")).stdout == "/tests\n"
        assert (await sb.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
        with pytest.raises(InvalidRequest):
            await sb.exec("pwd", cwd="/no/such/dir")
        with pytest.raises(InvalidRequest):
            await sb.exec("pwd", cwd="/etc/../..")


async def test_parallel_sandboxes_leave_no_overlay(tiny: SubprocessBackend) -> None:
    sandboxes = await asyncio.gather(*(tiny.open(FAST) for _ in range(64)))
    assert len(has_overlay_mounts([tiny.root])) == 64
    results = await asyncio.gather(*(sb.exec("cat /testbed/x.txt") for sb in sandboxes[:8]))
    assert all(r.stdout == "baked into the image\n" for r in results)
    await asyncio.gather(*(sb.close() for sb in sandboxes))
    assert has_overlay_mounts([tiny.root]) == []
    assert os.listdir(tiny.root) == []


async def test_cleanup_unmounts_what_a_crashed_process_left(tiny: SubprocessBackend) -> None:
    crash = (
        "import asyncio, os\n"
        "from sandboxkit.backends.subprocess import SubprocessBackend\n"
        "async def main():\n"
        f"    b = SubprocessBackend(rootfs={_needs_busybox()!r}, rootfs_cache={CACHE!r}, root={tiny.root!r})\n"
        "    sb = await b.open()\n"
        "    await sb.exec('echo hi > /testbed/left.txt')\n"
        "    os._exit(0)  # no close: the overlay and the tmpfs stay mounted\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", crash, env=env)
    assert await proc.wait() == 0
    assert len(has_overlay_mounts([tiny.root])) == 1
    assert await tiny.cleanup() >= 1  # crashed runs elsewhere on this machine may add cgroups to the count
    assert has_overlay_mounts([tiny.root]) == []
    assert os.listdir(tiny.root) == []


async def test_bad_options_are_invalid_requests(tmp_path: Path) -> None:
    not_tar = tmp_path / "image.txt"
    not_tar.write_text("not a tarball")
    for kwargs in (
        {"rootfs": str(tmp_path / "missing")},
        {"rootfs": str(not_tar)},
        {"rootfs": _needs_busybox(), "workdir": "relative"},
        {"rootfs": _needs_busybox(), "workdir": "/tmp/w"},
        {"rootfs": _needs_busybox(), "rootfs_cache": str(tmp_path / "a,b")},
    ):
        with pytest.raises(InvalidRequest):
            SubprocessBackend(**{"rootfs_cache": str(tmp_path / "cache"), **kwargs})  # type: ignore[arg-type]


async def test_unpacking_a_hostile_tarball_stays_in_the_cache(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", **kw: object) -> None:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            for key, value in kw.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        add("etc", tarfile.DIRTYPE, mode=0o755)
        add("etc/ok.txt", data=b"ok")
        add("../escape.txt")
        add("hostlink", tarfile.SYMTYPE, linkname=str(tmp_path))
        add("hostlink/through-link.txt")
        add("hard", tarfile.LNKTYPE, linkname="../../etc/passwd")
        add("suid", mode=0o4755)
        add("dev-null", tarfile.CHRTYPE, devmajor=1, devminor=3)
        add("/abs.txt", data=b"abs")
    tarball = tmp_path / "image.tar"
    tarball.write_bytes(buf.getvalue())
    image = load_image(str(tarball), str(tmp_path / "cache"))
    root = Path(image.path)
    assert (root / "etc" / "ok.txt").read_bytes() == b"ok"
    assert (root / "abs.txt").read_bytes() == b"abs"
    assert os.readlink(root / "hostlink") == str(tmp_path)  # kept as written: resolved inside the sandbox
    assert not (tmp_path / "through-link.txt").exists() and not (tmp_path.parent / "escape.txt").exists()
    assert not (root / "hard").exists() and not (root / "dev-null").exists()
    assert (root / "suid").stat().st_mode & 0o7777 == 0o755
    assert load_image(str(tarball), str(tmp_path / "cache")).path == image.path  # cached, not unpacked twice


# ---------------------------------------------------------------------- the base image (Python inside)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base() -> AsyncIterator[SubprocessBackend]:
    tarball = base_image_tarball()
    if tarball is None:
        missing("no Docker engine or sandboxkit-base image to export (scripts/docker-setup.sh)")
    backend = SubprocessBackend(rootfs=tarball, rootfs_cache=CACHE)
    try:
        yield backend
    finally:
        await backend.aclose()
        assert has_overlay_mounts([backend.root]) == []


@pytest.mark.docker  # the image comes from the Docker engine (docker export)
async def test_python_in_the_image_opens_testbed_files_warm(base: SubprocessBackend) -> None:
    async with _open(base) as sb:
        await sb.write_files({"/testbed/x.txt": "numbers 1 2 3"})
        code = "import os\nprint(open('/testbed/x.txt').read(), os.getcwd(), os.getuid())"
        result = await sb.run(RunRequest(code=code, limits=FAST))
        assert result.status is Status.OK, result
        assert result.stdout == "numbers 1 2 3 /testbed 0\n"
        assert base.rootfs is not None and base.rootfs.python_ok is True  # the fork server runs the image's python3
        await sb.write_files({"/tests/test.sh": VERIFIER})
        assert await _reward(sb, "42") == 1.0


@pytest.mark.docker  # the image comes from the Docker engine (docker export)
async def test_run_never_writes_through_a_working_directory_the_program_replaced(base: SubprocessBackend) -> None:
    host_dir = Path(tempfile.mkdtemp(prefix="hostside-", dir=os.path.dirname(CACHE)))
    try:
        async with _open(base) as sb:
            await sb.exec(f"rm -rf /testbed && ln -s {host_dir} /testbed", cwd="/")
            result = await sb.run(RunRequest(code="import os\nprint(os.getcwd())", files={"in.txt": "i"}, limits=FAST))
            assert result.status is Status.OK, result
            assert result.stdout == "/testbed\n"
            assert list(host_dir.iterdir()) == []  # the host followed no link to its own directory
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


def _open(backend: SubprocessBackend) -> _Opened:
    return _Opened(backend)


class _Opened:
    """``async with _open(backend) as sb``: a sandbox closed at the end, whatever happens."""

    def __init__(self, backend: SubprocessBackend) -> None:
        self.backend = backend

    async def __aenter__(self):  # type: ignore[no-untyped-def]
        self.sb = await self.backend.open(FAST)
        return self.sb

    async def __aexit__(self, *exc: object) -> None:
        await self.sb.close()


async def test_resolve_in_root_never_leaves_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "abs").symlink_to("/usr")
    (root / "up").symlink_to("../../../../../..")
    (root / "loop").symlink_to("loop")
    r = str(root)
    assert resolve_in_root(r, "/bin/x", follow_last=True) == f"{r}/usr/bin/x"
    assert resolve_in_root(r, "/abs/bin", follow_last=True) == f"{r}/usr/bin"  # absolute: from the root
    assert resolve_in_root(r, "/up/etc/passwd", follow_last=True) == f"{r}/etc/passwd"  # '..' stops at /
    assert resolve_in_root(r, "/abs", follow_last=False) == f"{r}/abs"  # the link itself
    with pytest.raises(OSError):
        resolve_in_root(r, "/loop/x", follow_last=True)
