"""Checkpoint and fork on Daytona through the SDK's snapshot API, against the loopback fake.

The fake implements the routes the SDK's generated client calls: ``POST /sandbox/{id}/snapshot``
(answers the sandbox, which the SDK polls out of "snapshotting"), ``GET /snapshots`` (paginated),
``GET /snapshots/{name}`` and ``DELETE /snapshots/{id}``, and creates a sandbox from a snapshot name.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable

import pytest

from fakes._common import interrupt_when_ready
from fakes.daytona_fake import FakeDaytona
from sandboxkit import SandboxPool
from sandboxkit.backends.daytona import DaytonaBackend
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits

SHORT = Limits(timeout_s=10)
MakeBackend = Callable[..., DaytonaBackend]


async def test_capability_and_pool_fork_isolation(fake: FakeDaytona, make_backend: MakeBackend) -> None:
    backend = make_backend()
    assert backend.capabilities.fork == "files"
    async with SandboxPool(backend, limits=SHORT) as pool:
        parent = pool.session()
        await parent.write_files({"repo/a.txt": "prepared"})
        checkpoint = await parent.checkpoint()
        assert list(fake.snapshots) == [checkpoint.id] and checkpoint.id.startswith("sandboxkit-")
        forks = await pool.fork(checkpoint, 3)
        await parent.close()
        await checkpoint.release()
        assert fake.snapshots == {}
        await forks[0].write_files({"repo/a.txt": "changed"})
        outs = [(await f.read_files(["repo/a.txt"]))["repo/a.txt"] for f in forks]
        assert outs == [b"changed", b"prepared", b"prepared"]
        with pytest.raises(InvalidRequest, match="released"):
            await pool.fork(checkpoint, 1)
        for f in forks:
            await f.close()
    assert fake.live_count == 0 and fake.snapshots == {}


async def test_cleanup_deletes_leaked_snapshots_only(fake: FakeDaytona, make_backend: MakeBackend) -> None:
    leaked = make_backend()
    sb = await leaked.open(SHORT)
    await sb.snapshot()
    leaked._snapshots.clear()  # as if the process died holding it
    await sb.close()
    fake.snapshots["someone-else"] = {"id": "x1", "dir": fake._tmp, "source": "other"}
    assert await make_backend().cleanup() == 1
    assert list(fake.snapshots) == ["someone-else"]
    fake.snapshots.clear()


def test_sigint_mid_fork_leaves_no_sandbox_and_no_snapshot(fake: FakeDaytona, service_env: dict[str, str]) -> None:
    script = textwrap.dedent(
        """
        import asyncio
        from sandboxkit import SandboxPool

        async def main():
            async with SandboxPool("daytona", max_concurrency=8) as pool:
                parent = pool.session()
                await parent.write_files({"state": "x"})
                checkpoint = await parent.checkpoint()
                while True:
                    for f in await pool.fork(checkpoint, 4):
                        await f.close()

        asyncio.run(main())
        """
    )

    def snapshots_taken() -> None:
        assert fake.snapshots

    err = interrupt_when_ready(script, {**os.environ, **service_env}, lambda: fake.ledger.created >= 6, snapshots_taken)
    assert fake.live_count == 0, f"sandboxes left behind after Ctrl-C; the child said: {err[-2000:]}"
    assert fake.snapshots == {}, "snapshots left behind after Ctrl-C"
