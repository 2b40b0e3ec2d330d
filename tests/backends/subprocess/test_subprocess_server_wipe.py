"""The reset's wipe, left to the next command's fork server (issue 30: host CPU per run).

A reset with bwrap no longer empties the workspace on the host: the next tenant's first warm Python
run tells its server to, before its child exists, and every other operation wipes on the host
first. So the guarantee to attack is the handover: no operation of a new tenant may see the last
tenant's files, and no wipe may remove the new tenant's own.
"""

from __future__ import annotations

import os

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._sandbox import INLINE_SOURCE_MAX
from sandboxkit.backends.subprocess._workspace import Workspace
from sandboxkit.models import Limits, RunRequest
from sandboxkit.pool import SandboxPool
from support.marks import requires
from support.subprocess_sandboxes import FAST, RecordingBackend

pytestmark = requires(RecordingBackend().isolation.bwrap is not None, "the server wipes only under bubblewrap")

LEAVE = (
    "import os\n"
    "open('secret.txt', 'w').write('last tenant')\n"
    "os.makedirs('pkg/sub', exist_ok=True)\n"
    "open('pkg/sub/json.py', 'w').write('raise SystemExit(3)')\n"
    "open('json.py', 'w').write('raise SystemExit(3)')\n"
    "os.symlink('/etc/passwd', 'link')\n"
    "print('left')\n"
)
LIST = "import os\nprint(sorted(os.listdir('.')))"


@pytest.fixture
async def one(backend: RecordingBackend) -> SandboxPool:
    """A pool of one sandbox, so every call lands in the sandbox the last one left."""
    return SandboxPool(backend, max_concurrency=1, limits=FAST)


async def _left_behind(pool: SandboxPool, backend: RecordingBackend) -> SubprocessSandbox:
    assert (await pool.run(LEAVE)).stdout == "left\n"
    assert len(backend.opened) == 1
    sandbox: SubprocessSandbox = backend.opened[0]
    assert sandbox._wipe_pending, "the reset left the wipe to the server"
    return sandbox


async def test_a_warm_run_finds_an_empty_workspace_and_the_host_wipes_nothing(
    one: SandboxPool, backend: RecordingBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with one as pool:
        await _left_behind(pool, backend)
        wipes = 0
        real = Workspace.wipe

        def counting(self: Workspace) -> None:
            nonlocal wipes
            wipes += 1
            real(self)

        monkeypatch.setattr(Workspace, "wipe", counting)
        for _ in range(5):
            assert (await pool.run(LIST)).stdout == "['main.py']\n"
            assert (await pool.run(LEAVE)).stdout == "left\n"
        assert wipes == 0, f"{wipes} host wipes for 10 pooled runs"
        assert os.path.exists("/etc/passwd")


@pytest.mark.parametrize(
    "first",
    ["read_files", "exec", "run_with_files", "write_then_run", "snapshot", "big_source"],
)
async def test_a_new_tenant_s_first_operation_never_sees_the_last_tenant_s_files(
    one: SandboxPool, backend: RecordingBackend, first: str
) -> None:
    async with one as pool:
        await _left_behind(pool, backend)
        async with pool.session() as session:
            if first == "read_files":
                assert await session.read_files(["secret.txt", "json.py", "pkg/sub/json.py"]) == {}
            elif first == "exec":
                result = await session.exec("ls -A")
                assert result.stdout == ""
            elif first == "run_with_files":
                result = await session.run(RunRequest(code=LIST, files={"mine.txt": "x"}))
                assert result.stdout == "['main.py', 'mine.txt']\n"
            elif first == "big_source":  # past INLINE_SOURCE_MAX the host writes main.py (CI found this)
                padding = "#" * (INLINE_SOURCE_MAX + 1000)
                result = await session.run(f"{padding}\n{LIST}")
                assert result.stdout == "['main.py']\n", result.stderr
            elif first == "write_then_run":
                await session.write_files({"mine.txt": "x", "json.py": "print('my own json')"})
                result = await session.run("import json\nimport os\nprint(sorted(os.listdir('.')))")
                # (importing its json.py made __pycache__)
                assert result.stdout == "my own json\n['__pycache__', 'json.py', 'main.py', 'mine.txt']\n", (
                    "the wipe took its files"
                )
            else:
                checkpoint = await session.checkpoint()
            # And the tenant's next run sees its own files only.
            listing = (await session.run(LIST)).stdout
            assert ("secret.txt" not in listing and "json.py" not in listing) or first == "write_then_run"
        if first == "snapshot":  # forked once the session is over (the pool has room for one sandbox)
            try:
                async with pool.session(from_checkpoint=checkpoint) as forked:
                    assert (await forked.exec("ls -A")).stdout == ""
            finally:
                await checkpoint.release()


async def test_what_the_server_cannot_remove_the_host_removes(one: SandboxPool, backend: RecordingBackend) -> None:
    locked = "import os\nos.mkdir('d')\nopen('d/f', 'w').close()\nos.chmod('d', 0o500)\nos.chmod('.', 0o500)\nprint(1)"
    async with one as pool:
        assert (await pool.run(locked)).stdout == "1\n"
        (sandbox,) = backend.opened
        server = sandbox._server
        result = await pool.run(LIST)
        assert result.stdout == "['main.py']\n", result.stderr
        assert sandbox._server is not server, "the server that refused the command was replaced"


async def test_a_server_that_dies_before_the_wipe_loses_the_sandbox_not_the_call(
    one: SandboxPool, backend: RecordingBackend
) -> None:
    async with one as pool:
        sandbox = await _left_behind(pool, backend)
        assert sandbox._server is not None
        sandbox._server.kill()  # between two tenants, as a crash would
        assert (await pool.run(LIST)).stdout == "['main.py']\n"
        assert len(backend.opened) == 2


async def test_without_bwrap_the_reset_wipes_on_the_host() -> None:
    backend = RecordingBackend().without_bwrap()
    try:
        async with SandboxPool(backend, max_concurrency=1, limits=Limits(timeout_s=10)) as pool:
            assert (await pool.run("open('x', 'w').close()")).status.value == "ok"
            (sandbox,) = backend.opened
            assert not sandbox._wipe_pending
            assert os.listdir(sandbox.workspace.path) == []
    finally:
        await backend.aclose()


@pytest.mark.parametrize("bwrap", [True, False])
async def test_a_tenant_that_takes_away_the_workspace_s_write_permission_fails_no_later_program(
    backend: RecordingBackend, bwrap: bool
) -> None:
    """A correct program scored 0 here before: its ``main.py`` could not be written (found in this change)."""
    if not bwrap:
        backend.without_bwrap()
    async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
        assert (await pool.run("import os\nos.chmod('.', 0o500)\nprint(1)")).stdout == "1\n"
        result = await pool.run("open('out.txt', 'w').write('x')\nprint('correct')")
        assert (result.status.value, result.stdout) == ("ok", "correct\n"), result.stderr
        async with pool.session() as session:  # and through the host's own wipe
            assert (await session.run("import os\nos.chmod('.', 0o500)\nprint(1)")).stdout == "1\n"
        async with pool.session() as session:
            await session.write_files({"given.txt": "y"})
            assert (await session.run("print(open('given.txt').read())")).stdout == "y\n"
