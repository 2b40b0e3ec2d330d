"""A thread the sandbox keeps between calls races the host's file operations (issue 27, items 1-2).

The attacker: a kernel cell (``Session.python``) starts a thread that keeps swapping a real
directory ``d`` and a link ``l`` aimed outside the workspace (``renameat2(RENAME_EXCHANGE)``), while
the host calls ``read_files`` and ``write_files`` on paths through ``d``. A host that checks a path
and then opens it by name follows the link whenever a swap lands in between.

What must hold on every backend that keeps kernels: a read returns the sandbox's own data, nothing
or an error, never the bytes of a file outside the workspace; and no file outside the workspace is
created or changed by a write. The target is a directory on the machine running the tests (for a
backend whose sandboxes run elsewhere, the link then dangles there, and the sandbox's own files are
all it can reach). ``SANDBOXKIT_RACE_ATTEMPTS`` sets the attempts per operation (default 200).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.errors import SandboxkitError
from sandboxkit.testing.conformance._base import ConformanceBase

ATTEMPTS = int(os.environ.get("SANDBOXKIT_RACE_ATTEMPTS", "200"))
OWN = b"the sandbox's own data"
MODEL = b"text the model chose"

#: The model's cell: a daemon thread that keeps exchanging ``d`` (a directory) and ``l`` (a link).
SWAPPER = """
import ctypes, os, threading
exchange = ctypes.CDLL(None, use_errno=True).renameat2
os.makedirs('d', exist_ok=True)
open('d/secret', 'wb').write({own!r})
def plant():
    # (re)make 'l' the link, moving aside whatever the host left in its place
    if os.path.lexists('l'):
        os.rename('l', 'moved-' + os.urandom(4).hex())
    os.symlink({target!r}, 'l')
plant()
def swap():
    while True:
        for _ in range(64):
            exchange(-100, b'd', -100, b'l', 2)  # RENAME_EXCHANGE
        if not os.path.islink('d') and not os.path.islink('l'):
            try:
                plant()
            except OSError:
                pass
threading.Thread(target=swap, daemon=True).start()
'swapping'
"""


class HostDirectory:
    """A directory outside any workspace (owner-only) holding one secret file: what the link aims at."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="sandboxkit-conformance-target-")
        os.chmod(self.path, 0o700)
        self.secret = f"OUTSIDE-{secrets.token_hex(8)}".encode()
        with open(os.path.join(self.path, "secret"), "wb") as f:
            f.write(self.secret)
        self.before = self.listing()

    def listing(self) -> dict[str, bytes]:
        """Every entry under the directory with its content (links and directories as empty)."""
        out: dict[str, bytes] = {}
        for top, dirs, files in os.walk(self.path):
            for name in dirs + files:
                full = os.path.join(top, name)
                body = b""
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as f:
                        body = f.read()
                out[os.path.relpath(full, self.path)] = body
        return out


class RaceTests(ConformanceBase):
    """Host file operations under a link-swapping kernel thread (gated on ``kernels``)."""

    @pytest.fixture
    def outside(self) -> Iterator[HostDirectory]:
        target = HostDirectory()
        try:
            yield target
        finally:
            shutil.rmtree(target.path, ignore_errors=True)

    async def start_swapper(self, backend: Backend, sandbox: Sandbox, outside: HostDirectory) -> None:
        self.require_contained()
        if not (backend.capabilities.kernels and backend.capabilities.stateful):
            pytest.skip("the backend keeps no kernel between calls, so nothing races the host's file operations")
        kernel = await sandbox.open_kernel()
        started = await kernel.run(SWAPPER.format(own=OWN, target=outside.path))
        assert started.value == "'swapping'", started

    @pytest.mark.timeout(300)
    async def test_reads_under_a_link_swapping_thread_stay_in_the_workspace(
        self, backend: Backend, sandbox: Sandbox, outside: HostDirectory
    ) -> None:
        await self.start_swapper(backend, sandbox, outside)
        seen = 0
        for _ in range(ATTEMPTS):
            try:
                found = await sandbox.read_files(["d/secret"])
            except SandboxkitError:
                continue  # an error is an honest end; content from outside the workspace is not
            for body in found.values():
                assert outside.secret not in body, "a read returned a file from outside the workspace"
                assert body == OWN, body[:80]
                seen += 1
        assert seen, "no read came back: the race never ran against a readable file"
        assert outside.listing() == outside.before

    @pytest.mark.timeout(300)
    async def test_writes_under_a_link_swapping_thread_stay_in_the_workspace(
        self, backend: Backend, sandbox: Sandbox, outside: HostDirectory
    ) -> None:
        await self.start_swapper(backend, sandbox, outside)
        for attempt in range(ATTEMPTS):
            try:
                await sandbox.write_files({"d/secret": MODEL, f"d/new-{attempt % 8}": MODEL})
            except SandboxkitError:
                continue
        assert outside.listing() == outside.before, "a write created or changed a file outside the workspace"
