"""Checkpoint and fork on the subprocess backend: isolation, copy-on-write cost, lifetime, hostile files."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend, SubprocessSandbox
from sandboxkit.backends.subprocess._fork import DirectorySnapshot
from sandboxkit.errors import InvalidRequest, SandboxCrashed
from sandboxkit.models import Status
from support.subprocess_sandboxes import FAST, RecordingBackend


def _mounts_under(root: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(root + "/")]


@pytest.fixture
def root() -> Iterator[str]:
    # A private root, so "nothing left" can be checked without seeing other tests' sandboxes. Not
    # under pytest's tmp_path: sandbox users must be able to traverse it (bwrap binds from it).
    path = tempfile.mkdtemp(prefix="sandboxkit-forktest-")
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def own_backend(root: str) -> AsyncIterator[RecordingBackend]:
    b = RecordingBackend(root=root)
    try:
        yield b
    finally:
        await b.aclose()
        assert _mounts_under(b.root) == []
        assert os.listdir(b.root) == []


@pytest.fixture
async def parent(own_backend: RecordingBackend) -> AsyncIterator[SubprocessSandbox]:
    sb = await own_backend.open(FAST)
    await sb.write_files({"shared.txt": "from parent\n", "pkg/mod.py": "VALUE = 1\n"})
    result = await sb.exec("mkdir -p data && seq 1 1000 > data/numbers && chmod +x pkg/mod.py")
    assert result.status is Status.OK, result
    try:
        yield sb
    finally:
        await sb.close()


async def test_fork_capability_is_files(own_backend: RecordingBackend) -> None:
    assert own_backend.capabilities.fork == "files"
    assert any(note.startswith("fork:") for note in own_backend.capabilities.notes)


async def test_children_writes_reach_neither_siblings_nor_parent(
    own_backend: RecordingBackend, parent: SubprocessSandbox
) -> None:
    snap = await parent.snapshot()
    try:
        kids = [await own_backend.open_from(snap, FAST) for _ in range(3)]
        # The parent changes after the checkpoint: no child sees it.
        await parent.write_files({"shared.txt": "parent later\n"})
        r = await kids[0].exec("echo child0 > shared.txt && rm data/numbers && echo new > pkg/new.py && ls")
        assert r.status is Status.OK, r
        await kids[1].write_files({"pkg/mod.py": "VALUE = 2\n"})
        for i, kid in enumerate(kids):
            files = await kid.read_files(["shared.txt", "data/numbers", "pkg/mod.py", "pkg/new.py"])
            assert files["shared.txt"] == (b"child0\n" if i == 0 else b"from parent\n")
            assert ("data/numbers" in files) == (i != 0)
            assert files["pkg/mod.py"] == (b"VALUE = 2\n" if i == 1 else b"VALUE = 1\n")
            assert ("pkg/new.py" in files) == (i == 0)
        assert (await parent.read_files(["shared.txt", "pkg/new.py"])) == {"shared.txt": b"parent later\n"}
        # Modes survive (the executable bit), and the child's user owns its files.
        r = await kids[2].exec(
            "test -x pkg/mod.py && test $(stat -c %u data/numbers) = $(id -u) && echo ok >> data/numbers"
        )
        assert r.status is Status.OK, r
        for kid in kids:
            await kid.close()
    finally:
        await snap.release()


async def test_children_outlive_their_parent_and_the_released_checkpoint(
    own_backend: RecordingBackend, parent: SubprocessSandbox
) -> None:
    snap = await parent.snapshot()
    kids = [await own_backend.open_from(snap, FAST) for _ in range(2)]
    await parent.close()
    await snap.release()
    await snap.release()  # idempotent
    assert own_backend.live_snapshots == 0
    assert not any(m.endswith("-ckpt") for m in _mounts_under(own_backend.root)), "released checkpoint still mounted"
    for kid in kids:
        r = await kid.exec("wc -l < data/numbers && echo more >> shared.txt && cat shared.txt")
        assert r.status is Status.OK, r
        assert r.stdout == "1000\nfrom parent\nmore\n"
    with pytest.raises(InvalidRequest, match="released"):
        await own_backend.open_from(snap, FAST)
    for kid in kids:
        await kid.close()


async def test_a_fork_costs_inodes_not_a_copy(own_backend: RecordingBackend) -> None:
    if not own_backend.isolation.tmpfs:
        pytest.skip("mounts are refused here: forks are full copies")
    sb = await own_backend.open(FAST)
    size = 16 << 20
    await sb.exec("mkdir -p blob && for i in $(seq 1 64); do head -c 262144 /dev/urandom > blob/f$i; done")
    snap = await sb.snapshot()
    assert isinstance(snap, DirectorySnapshot) and snap.size_bytes == size
    kid = await own_backend.open_from(snap, FAST)
    assert kid.workspace.path in _mounts_under(own_backend.root), "the child's workspace is not an overlay"
    st = os.statvfs(kid._base)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    assert used < size * 0.05, f"a fork used {used} bytes of its tmpfs for a {size}-byte workspace"
    r = await kid.exec("cat blob/* | wc -c")
    assert r.stdout.strip() == str(size)
    for s in (kid, sb):
        await s.close()
    await snap.release()


async def test_hostile_files_are_copied_safely(own_backend: RecordingBackend) -> None:
    sb = await own_backend.open(FAST)
    r = await sb.exec("ln -s /etc/hostname link && mkfifo pipe && ln -s .. up && echo x > plain")
    assert r.status is Status.OK, r
    snap = await sb.snapshot()  # a FIFO must not block the copy; links are not followed
    kid = await own_backend.open_from(snap, FAST)
    r = await kid.exec("readlink link; readlink up; test -e pipe || echo nopipe; cat plain")
    assert r.stdout == "/etc/hostname\n..\nnopipe\nx\n"
    for s in (kid, sb):
        await s.close()
    await snap.release()


async def test_wrong_or_closed_sources_are_clear_errors(own_backend: RecordingBackend, root: str) -> None:
    sb = await own_backend.open(FAST)
    snap = await sb.snapshot()
    other = SubprocessBackend(root=os.path.join(root, "other"))
    try:
        with pytest.raises(InvalidRequest, match="another backend"):
            await other.open_from(snap, FAST)
    finally:
        await other.aclose()
        os.rmdir(other.root)
    await sb.close()
    with pytest.raises(SandboxCrashed):
        await sb.snapshot()
    await snap.release()


async def test_backend_close_releases_its_checkpoints(root: str) -> None:
    b = SubprocessBackend(root=root)
    sb = await b.open(FAST)
    await sb.write_files({"a": "1"})
    await sb.snapshot()
    assert b.live_snapshots == 1
    await b.aclose()
    assert b.live_snapshots == 0
    assert os.listdir(b.root) == [] and _mounts_under(b.root) == []
