"""Checkpoint and fork (``Sandbox.snapshot`` / ``Backend.open_from``), gated on ``capabilities.fork``.

A backend that cannot fork must say so with a clear ``InvalidRequest``; one that can must give
forks that start with the files the sandbox had when the snapshot was taken, and that are
independent of each other, of the parent and of the snapshot (closing the parent and releasing
the snapshot leaves them working).
"""

from __future__ import annotations

import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.errors import InvalidRequest, SandboxCrashed
from sandboxkit.testing.conformance._base import ConformanceBase


class ForkTests(ConformanceBase):
    """Checkpoint and fork."""

    def require_fork(self, backend: Backend) -> None:
        if backend.capabilities.fork == "none":
            pytest.skip("capabilities.fork is 'none'")

    async def test_fork_unsupported_is_invalid_request(self, backend: Backend, sandbox: Sandbox) -> None:
        if backend.capabilities.fork != "none":
            pytest.skip("this backend forks (the fork tests below apply)")
        with pytest.raises(InvalidRequest, match="fork"):
            await sandbox.snapshot()

    async def test_snapshot_after_close_raises_sandbox_crashed(self, backend: Backend) -> None:
        self.require_fork(backend)
        sb = await backend.open(self.limits)
        await sb.close()
        with pytest.raises(SandboxCrashed):
            await sb.snapshot()

    async def test_open_from_released_snapshot_is_invalid_request(self, backend: Backend, sandbox: Sandbox) -> None:
        self.require_fork(backend)
        snap = await sandbox.snapshot()
        await snap.release()
        await snap.release()  # idempotent
        with pytest.raises(InvalidRequest, match="released"):
            await backend.open_from(snap, self.limits)

    async def test_forks_are_independent_of_each_other_and_the_parent(self, backend: Backend) -> None:
        self.require_fork(backend)
        parent = await backend.open(self.limits)
        kids: list[Sandbox] = []
        try:
            await parent.write_files({"state/a.txt": "prepared", "b.txt": "bee"})
            snap = await parent.snapshot()
            try:
                kids = [await backend.open_from(snap, self.limits) for _ in range(2)]
                await parent.write_files({"state/a.txt": "parent later"})
                await kids[0].write_files({"state/a.txt": "kid0", "only0.txt": "x"})
            finally:
                await snap.release()
            await parent.close()
            first = await kids[0].read_files(["state/a.txt", "b.txt", "only0.txt"])
            second = await kids[1].read_files(["state/a.txt", "b.txt", "only0.txt"])
            assert first == {"state/a.txt": b"kid0", "b.txt": b"bee", "only0.txt": b"x"}
            assert second == {"state/a.txt": b"prepared", "b.txt": b"bee"}
            result = await kids[1].exec("cat state/a.txt")
            assert result.stdout == "prepared"
        finally:
            for sb in [parent, *kids]:
                await sb.close()

    async def test_restore_into_a_reset_sandbox_is_a_clean_fork(self, backend: Backend) -> None:
        if backend.capabilities.fork == "none" or not backend.capabilities.fork_warm:
            pytest.skip("capabilities.fork_warm is False: forks always start in new sandboxes")
        parent = await backend.open(self.limits)
        used = await backend.open(self.limits)
        try:
            await parent.write_files({"state/a.txt": "prepared"})
            snap = await parent.snapshot()
            try:
                await used.write_files({"left.txt": "the last tenant's", "state/a.txt": "old"})
                assert await used.reset()
                assert await used.restore(snap)
            finally:
                await snap.release()
            assert not await used.restore(snap)  # released: refused, never half-loaded
            await used.write_files({"state/a.txt": "fork"})
            got = await used.read_files(["state/a.txt", "left.txt"])
            assert got == {"state/a.txt": b"fork"}
            assert await parent.read_files(["state/a.txt"]) == {"state/a.txt": b"prepared"}
        finally:
            await parent.close()
            await used.close()
