"""Checkpoint and fork on E2B through the SDK's snapshot API, against the loopback fake.

The fake implements the three routes the SDK's generated client calls (``POST
/sandboxes/{id}/snapshots`` -> 201 ``{snapshotID, names}``, ``GET /snapshots``, ``DELETE
/templates/{id}`` -> 204/404) and creates a sandbox from a snapshot id as from a template.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable

import pytest

from fakes._common import interrupt_when_ready
from fakes.e2b_fake import FakeE2B
from sandboxkit import SandboxPool
from sandboxkit.backends.e2b import E2BBackend
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits

SHORT = Limits(timeout_s=10)
MakeBackend = Callable[..., E2BBackend]


async def test_capability_and_pool_fork_isolation(fake: FakeE2B, make_backend: MakeBackend) -> None:
    backend = make_backend()
    assert backend.capabilities.fork == "memory"
    async with SandboxPool(backend, limits=SHORT) as pool:
        parent = pool.session()
        await parent.write_files({"repo/a.txt": "prepared"})
        checkpoint = await parent.checkpoint(env={"MODE": "rollout"})
        assert checkpoint.id in fake.snapshots and checkpoint.id.split("/")[-1].startswith("sandboxkit-")
        forks = await pool.fork(checkpoint, 3)
        await parent.close()
        await checkpoint.release()
        assert fake.snapshots == {}
        await forks[0].write_files({"repo/a.txt": "changed"})
        outs = [(await f.exec('cat repo/a.txt; echo " $MODE"')).stdout for f in forks]
        assert outs == ["changed rollout\n", "prepared rollout\n", "prepared rollout\n"]
        with pytest.raises(InvalidRequest, match="released"):
            await pool.fork(checkpoint, 1)
        for f in forks:
            await f.close()
    assert fake.live_count == 0 and fake.snapshots == {}


async def test_pool_close_and_cleanup_delete_snapshots(fake: FakeE2B, make_backend: MakeBackend) -> None:
    backend = make_backend()
    async with SandboxPool(backend, limits=SHORT) as pool, pool.session() as s:
        await s.write_files({"x": "1"})
        await s.checkpoint()  # never released: the pool's close releases it
        assert len(fake.snapshots) == 1
    assert fake.snapshots == {}
    # A crashed run's snapshot (named sandboxkit-...) is found by cleanup; a stranger's is kept.
    leaked = make_backend()
    sb = await leaked.open(SHORT)
    await sb.snapshot()
    leaked._snapshots.clear()  # as if the process died holding it
    await sb.close()
    other = fake.new_box({})
    fake.snapshots["fake-team/someone-else:default"] = (fake.box(other.id).home, ["fake-team/someone-else:default"])
    assert await make_backend().cleanup() == 1
    assert list(fake.snapshots) == ["fake-team/someone-else:default"]
    fake.snapshots.clear()
    fake.remove(other.id)


def test_sigint_mid_fork_leaves_no_sandbox_and_no_snapshot(fake: FakeE2B, service_env: dict[str, str]) -> None:
    script = textwrap.dedent(
        """
        import asyncio
        from sandboxkit import SandboxPool

        async def main():
            async with SandboxPool("e2b", max_concurrency=8) as pool:
                parent = pool.session()
                await parent.write_files({"state": "x"})
                checkpoint = await parent.checkpoint()
                while True:
                    forks = await pool.fork(checkpoint, 4)
                    for f in forks:
                        await f.exec("sleep 0.05")
                        await f.close()

        asyncio.run(main())
        """
    )

    def snapshots_taken() -> None:
        assert fake.snapshots

    interrupt_when_ready(script, {**os.environ, **service_env}, lambda: fake.ledger.created >= 6, snapshots_taken)
    assert fake.live_count == 0, "sandboxes left behind after Ctrl-C"
    assert fake.snapshots == {}, "snapshots left behind after Ctrl-C"
    assert fake.running_processes() == []
