"""A process the sandbox keeps between calls races the host's file operations with symlink swaps.

The attacker is the one issue 27 describes: a ``Session.python`` cell starts a thread that
loops ``renameat2(RENAME_EXCHANGE)`` between a real directory ``d`` and a link ``l`` to a
root-only host directory (the canary), while the host reads, writes, fetches and checkpoints
paths through ``d``. A host that checks a path and then opens it by name follows the link half
of the time the swap lands in between. Every test holds: no byte of the canary ever reaches the
host's caller or a checkpoint, nothing in the canary is created or changed, and each operation
ends with the sandbox's own data, an absent file, or an error.

The last tests hold the other two halves: the kernel is really frozen while the host holds
the files (and thawed after an error), and a checkpoint keeps holes and stays within ``disk_mb``.

Each race test runs with the kernel frozen around host file operations (the default) and
with freezing switched off: the fd walk alone must already make the race harmless.
``SANDBOXKIT_RACE_ATTEMPTS`` raises the attempts per operation (CI: a few hundred, seconds).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import pathlib
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess import _beneath as beneath
from sandboxkit.backends.subprocess import _freeze as freeze
from sandboxkit.backends.subprocess._fork import DirectorySnapshot, _copy_tree
from sandboxkit.errors import SandboxkitError
from sandboxkit.models import RunRequest
from support import kernels
from support.marks import missing
from support.subprocess_sandboxes import FAST, RecordingBackend

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the canary must be a root-only host directory")

ATTEMPTS = int(os.environ.get("SANDBOXKIT_RACE_ATTEMPTS", "300"))
#: Runs, checkpoints and agent steps cost a fork or a copy each: CI does fewer, a stress run (the
#: variable set) does ``ATTEMPTS`` of every kind.
SLOW_ATTEMPTS = ATTEMPTS if "SANDBOXKIT_RACE_ATTEMPTS" in os.environ else 100
OWN = b"the sandbox's own data"
MODEL = b"text the model chose"

#: The model's cell: a thread that keeps swapping ``d`` (a directory) and ``l`` (a link to the canary).
SWAPPER = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs('d/sub', exist_ok=True)
with open('d/secret', 'wb') as f:
    f.write({own!r})
if os.path.lexists('l'):
    os.unlink('l')
os.symlink({canary!r}, 'l')
def swap():
    n = 0
    while True:
        libc.renameat2(-100, b'd', -100, b'l', 2)
        n += 1
        if n % 64 == 0 and not (os.path.islink('d') or os.path.islink('l')):
            try:  # the host made the link a directory: plant a new one
                os.rename('l', 'old-%d' % n)
                os.symlink({canary!r}, 'l')
            except OSError:
                pass
threading.Thread(target=swap, daemon=True).start()
'swapping'
"""


class Canary:
    """A root-only host directory holding one secret file; the attack aims the sandbox's link at it."""

    def __init__(self, base: str | None = None) -> None:
        self.path = tempfile.mkdtemp(prefix="sandboxkit-canary-", dir=base)
        os.chmod(self.path, 0o700)
        self.secret = f"HOST-SECRET-{secrets.token_hex(8)}".encode()
        with open(os.path.join(self.path, "secret"), "wb") as f:
            f.write(self.secret)
        self._before = self.state()

    def state(self) -> dict[str, tuple[int, int, bytes]]:
        out = {}
        for top, dirs, files in os.walk(self.path):
            for name in dirs + files:
                full = os.path.join(top, name)
                st = os.lstat(full)
                body = b""
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as f:
                        body = f.read()
                out[os.path.relpath(full, self.path)] = (st.st_mtime_ns, st.st_uid, body)
        return out

    def assert_untouched(self) -> None:
        assert self.state() == self._before, "the host created or changed a file in a root-only host directory"

    def assert_not_in(self, data: bytes) -> None:
        assert self.secret not in data, "a host file's content reached the caller"


@pytest.fixture
def canary() -> Iterator[Canary]:
    c = Canary()
    try:
        yield c
    finally:
        shutil.rmtree(c.path, ignore_errors=True)


@pytest.fixture(params=["frozen", "fd-walk-alone", "openat-chain-alone"])
def freezing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Frozen kernel; no freezing (the fd walk alone); no freezing and no ``openat2`` (an old kernel's walk)."""
    if request.param != "frozen":
        monkeypatch.setattr(freeze, "ENABLED", False)
    if request.param == "openat-chain-alone":
        monkeypatch.setattr(beneath._OPENAT2, "usable", False)
    return str(request.param)


async def _start_swapper(sb: SubprocessSandbox, canary: Canary) -> None:
    result = await kernels.cell(sb, SWAPPER.format(own=OWN, canary=canary.path))
    assert result.value == "'swapping'", result


def _check_read(found: dict[str, bytes], canary: Canary) -> None:
    for body in found.values():
        canary.assert_not_in(body)
        assert body in (OWN, MODEL), body[:80]


async def test_reads_through_a_swapped_link_never_return_host_files(
    sandbox: SubprocessSandbox, canary: Canary, freezing: str
) -> None:
    await _start_swapper(sandbox, canary)
    tally = collections.Counter[str]()
    for _ in range(ATTEMPTS):
        for path in ("d/secret", "l/secret"):
            try:
                found = await sandbox.read_files([path])
            except SandboxkitError:
                tally["error"] += 1  # a clear error is a fair end; a host file's bytes are not
                continue
            _check_read(found, canary)
            tally["own data" if found else "absent"] += 1
    print(f"{freezing}: {2 * ATTEMPTS} reads: {dict(tally)}")  # -rP shows how often the swap was hit
    canary.assert_untouched()


async def test_writes_through_a_swapped_link_never_touch_host_files(
    sandbox: SubprocessSandbox, canary: Canary, freezing: str
) -> None:
    await _start_swapper(sandbox, canary)
    writes = [{"d/secret": MODEL}, {"l/new": MODEL}, {"d/sub/deeper/x": MODEL}, {"l/sub/y": MODEL}]
    errors = 0
    for i in range(ATTEMPTS):
        for files in writes:
            try:
                await sandbox.write_files(files)
            except SandboxkitError:
                errors += 1  # a clear error is a fair end; a write that reached the host is not
        if i % 16 == 0:
            canary.assert_untouched()
    canary.assert_untouched()
    print(f"{freezing}: {len(writes) * ATTEMPTS} writes, {errors} refused as raced")
    assert errors < ATTEMPTS * len(writes), "every write failed: the sandbox's own files must stay writable"


async def test_fetch_through_a_swapped_link_never_returns_host_files(
    sandbox: SubprocessSandbox, canary: Canary, freezing: str
) -> None:
    await _start_swapper(sandbox, canary)
    for _ in range(SLOW_ATTEMPTS):
        try:
            result = await sandbox.run(RunRequest(code="pass", language="python", fetch_files=["d/secret", "l/secret"]))
        except SandboxkitError:
            continue
        _check_read(result.files, canary)
    canary.assert_untouched()


async def test_exec_cwd_through_a_swapped_link_never_probes_host_directories(
    sandbox: SubprocessSandbox, canary: Canary, freezing: str
) -> None:
    """``only-on-host`` exists in the canary, not in ``d``: a cwd check that stats it through the
    link tells the caller that a host directory exists (the command runs instead of being refused)."""
    os.mkdir(os.path.join(canary.path, "only-on-host"))
    await _start_swapper(sandbox, canary)
    for _ in range(SLOW_ATTEMPTS):
        for cwd in ("d/only-on-host", "l/only-on-host"):
            with pytest.raises(SandboxkitError):
                await sandbox.exec("true", cwd=cwd)


async def test_checkpoints_never_copy_host_files(sandbox: SubprocessSandbox, canary: Canary, freezing: str) -> None:
    await _start_swapper(sandbox, canary)
    for _ in range(SLOW_ATTEMPTS):
        try:
            snap = await sandbox.snapshot()
        except SandboxkitError:
            continue  # a clear error is a fair end
        assert isinstance(snap, DirectorySnapshot)
        try:
            for top, _dirs, files in os.walk(snap.path):
                for name in files:
                    full = os.path.join(top, name)
                    if not os.path.islink(full):
                        with open(full, "rb") as f:
                            canary.assert_not_in(f.read())
        finally:
            await snap.release()
    canary.assert_untouched()


def _cpu_ticks(freezer: freeze.Freezer) -> int:
    """CPU clock ticks (utime + stime) used so far by every thread in the freezer's cgroup.

    Why not the scheduler state: a task frozen by the v1 freezer shows 'D', one frozen by v2's
    ``cgroup.freeze`` shows 'S' (kernel 6.x); what freezing means on both is that no thread runs.
    """
    ticks = 0
    with open(os.path.join(freezer.directory, "cgroup.procs")) as f:
        pids = f.read().split()
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                    ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks


def _kernel_says_frozen(freezer: freeze.Freezer) -> bool:
    """The kernel's own word: ``frozen 1`` in v2's ``cgroup.events``, ``FROZEN`` in v1's ``freezer.state``."""
    if freezer.version == 2:
        with open(os.path.join(freezer.directory, "cgroup.events")) as f:
            return "frozen 1" in f.read().splitlines()
    with open(os.path.join(freezer.directory, "freezer.state")) as f:
        return f.read().strip() == "FROZEN"


def _ticks_advance(freezer: freeze.Freezer, within_s: float) -> bool:
    """Whether the cgroup's threads use any CPU within ``within_s`` (a busy thread always does unless stopped)."""
    before = _cpu_ticks(freezer)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if _cpu_ticks(freezer) != before:
            return True
    return False


async def test_the_kernel_is_frozen_while_the_host_holds_its_files_and_thawed_after_an_error(
    sandbox: SubprocessSandbox,
) -> None:
    busy = "import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\n1"
    assert (await kernels.cell(sandbox, busy)).value == "1"
    freezer = sandbox._freezer
    if freezer is None:
        missing("no cgroup freezer for the kernel (cgroup v1 freezer or v2 cgroup.freeze, as root)")
    assert freezer is not None
    assert _ticks_advance(freezer, 5.0), "the busy thread never ran"
    with pytest.raises(RuntimeError), freeze.frozen(freezer):
        assert _kernel_says_frozen(freezer)
        assert not _ticks_advance(freezer, 0.5), "a thread of the kernel ran while frozen"
        raise RuntimeError("the host's file operation failed")
    assert not _kernel_says_frozen(freezer), "the kernel stayed frozen after the host's error"
    assert _ticks_advance(freezer, 5.0), "the busy thread did not run again after the thaw"
    assert (await kernels.cell(sandbox, "2")).value == "2"
    await sandbox.close()
    assert not os.path.exists(freezer.directory) or freezer.version == 2, "the freezer cgroup outlived the kernel"


async def test_checkpoints_keep_holes_and_stay_within_the_disk_limit(backend: RecordingBackend) -> None:
    sb = await backend.open(FAST.merged(file_size_mb=16 << 10))
    try:
        made = await sb.exec("truncate -s 8G sparse && head -c 4096 /dev/urandom > data && truncate -s 1M data")
        assert made.ok, made
        snap = await sb.snapshot()
        assert isinstance(snap, DirectorySnapshot)
        try:
            sparse = os.stat(os.path.join(snap.path, "sparse"))
            assert sparse.st_size == 8 << 30 and sparse.st_blocks == 0, "a hole was copied as data"
            data = os.stat(os.path.join(snap.path, "data"))
            assert data.st_size == 1 << 20 and data.st_blocks * 512 < 64 << 10
            assert snap.size_bytes == 4096
        finally:
            await snap.release()
    finally:
        await sb.close()


def test_a_copy_stops_at_its_budget(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "a").write_bytes(b"x" * 3000)
    with pytest.raises(OSError) as caught:
        _copy_tree(str(src), str(dst), None, budget=2000)
    assert caught.value.errno == errno.ENOSPC


def test_an_rllm_agent_cannot_reach_host_files_with_its_own_tool_calls(canary: Canary, freezing: str) -> None:
    """Issue 27 item 2: one ``code_interpreter`` call starts the swapper, then ``str_replace_editor``
    views and creates files on the swapped paths. The transcript never shows a host file, and the
    model's text never lands in a host directory."""
    from sandboxkit.integrations.rllm import SandboxEnv

    task = {"problem_statement": "swap", "files": {"/testbed/README.md": "readme\n"}, "solution_path": "/testbed/s.py"}
    env = SandboxEnv.from_dict({**task, "backend": "subprocess", "stateful_python": True})

    def step(name: str, **arguments: str) -> str:
        observation, _, done, info = env.step({"name": name, "arguments": arguments})
        assert not done and not info.get("infra_error"), (observation, info)
        canary.assert_not_in(observation.encode())
        return str(observation)

    try:
        env.reset()
        assert "swapping" in step("code_interpreter", code=SWAPPER.format(own=OWN, canary=canary.path))
        for i in range(SLOW_ATTEMPTS):
            step("str_replace_editor", command="view", path="d/secret")
            step("str_replace_editor", command="view", path="l/secret")
            step("str_replace_editor", command="create", path=f"l/new-{i % 3}", file_text=MODEL.decode())
            step("str_replace_editor", command="create", path="d/secret", file_text=MODEL.decode())
        canary.assert_untouched()
    finally:
        env.close()
    canary.assert_untouched()


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "openat-chain"])
def test_open_beneath_refuses_a_link_at_any_component(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, openat2: bool
) -> None:
    monkeypatch.setattr(beneath._OPENAT2, "usable", openat2 and beneath._OPENAT2.usable)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_bytes(b"host")
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "f").write_bytes(b"own")
    (ws / "a" / "up").symlink_to(tmp_path / "outside")
    (ws / "a" / "in").symlink_to("b")  # even a link that stays inside is refused: the host never follows one
    (ws / "last").symlink_to(tmp_path / "outside" / "f")
    os.mkfifo(ws / "fifo")
    top = beneath.open_dir(str(ws))
    try:
        fd = beneath.open_beneath(top, "a/b/f", os.O_RDONLY)
        assert os.read(fd, 10) == b"own"
        os.close(fd)
        for rel in ("a/up/f", "a/in/f", "last"):
            with pytest.raises(OSError) as caught:
                beneath.open_beneath(top, rel, os.O_RDONLY)
            assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR), rel
        with pytest.raises(OSError) as caught:
            beneath.open_beneath(top, "fifo", os.O_WRONLY | os.O_NONBLOCK)
        assert caught.value.errno == errno.ENXIO, "a FIFO without a reader must not block the host"
        for bad in ("../outside/f", "/etc/passwd", "a/./b/f", ""):
            with pytest.raises(OSError):
                beneath.open_beneath(top, bad, os.O_RDONLY)
        made = beneath.make_dirs(top, ["a", "up", "new"], None)  # the link in the way becomes a directory
        os.close(made)
        assert (ws / "a" / "up").is_dir() and not (ws / "a" / "up").is_symlink()
        assert sorted(os.listdir(tmp_path / "outside")) == ["f"]
    finally:
        os.close(top)


#: The same attack on a rootfs view, from a process of the view's uid outside it: it swaps
#: ``/testbed/d`` with a link to the canary, and ``/testbed`` itself with another.
HOST_SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.symlink(sys.argv[1], 'testbed/l')
os.symlink(sys.argv[1], 'tb')
print('swapping', flush=True)
n = 0
while True:
    libc.renameat2(-100, b'testbed/d', -100, b'testbed/l', 2)
    libc.renameat2(-100, b'testbed', -100, b'tb', 2)
    libc.renameat2(-100, b'tb', -100, b'testbed', 2)
    n += 1
    for top, name in (('testbed', 'l'), ('.', 'tb')):
        if n % 64 == 0 and not os.path.islink(os.path.join(top, name)):
            try:  # the host made a link a directory: plant a new one
                os.rename(os.path.join(top, name), os.path.join(top, 'old-%d' % n))
                os.symlink(sys.argv[1], os.path.join(top, name))
            except OSError:
                pass
"""


async def test_a_rootfs_view_swapped_under_the_host_never_reaches_host_files(
    tmp_path: pathlib.Path, freezing: str
) -> None:
    from sandboxkit.backends.subprocess import SubprocessBackend
    from support.rootfs import CACHE, busybox_rootfs

    image = busybox_rootfs()
    if image is None:
        missing("no static busybox here: apt-get install busybox-static (scripts/bootstrap.sh --all)")
    assert image is not None
    canary = Canary(str(tmp_path))  # not below /tmp: the view's /tmp is private, and that is refused before any race
    os.chmod(tmp_path, 0o711)
    root = tempfile.mkdtemp(prefix="sandboxkit-race-rootfs-")
    os.chmod(root, 0o711)
    backend = SubprocessBackend(rootfs=image, rootfs_cache=CACHE, root=root)
    sb = await backend.open(FAST)
    swapper = None
    try:
        await sb.write_files({"/testbed/d/secret": OWN})
        assert sb.view is not None
        swapper = subprocess.Popen(
            [backend.server_python or "/usr/bin/python3", "-c", HOST_SWAPPER, canary.path],  # one the uid may run
            cwd=sb.view.root,
            user=sb.uid,  # the view's owner (its own uid, or the shared ROOTFS_UID without idmapped layers)
            group=sb.uid,
            stdout=subprocess.PIPE,
        )
        assert swapper.stdout is not None and swapper.stdout.readline() == b"swapping\n"
        for i in range(ATTEMPTS):
            for path in ("d/secret", "l/secret", "/testbed/d/secret", "/testbed/l/secret", "/tb/d/secret"):
                try:
                    _check_read(await sb.read_files([path]), canary)
                except SandboxkitError:
                    pass
            for files in ({"d/secret": OWN}, {"l/new": MODEL}, {"/testbed/l/deep/x": MODEL}, {"/tb/y": MODEL}):
                try:
                    await sb.write_files(files)
                except SandboxkitError:
                    pass
            if i % 16 == 0:
                canary.assert_untouched()
        canary.assert_untouched()
    finally:
        if swapper is not None:
            swapper.kill()
            swapper.wait()
        await sb.close()
        await backend.aclose()
        shutil.rmtree(root, ignore_errors=True)
    canary.assert_untouched()
