"""``Session.checkpoint`` and ``pool.fork``: isolation, lifetimes, metrics, errors, and the sync twin.

Run on the subprocess backend (real sandboxes, copy-on-write forks); the pool logic is the same
on every backend, whose own fork tests live in tests/backends and tests/conformance.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sandboxkit import Checkpoint, SandboxPool, Session, SyncSandboxPool
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.errors import DeadlineExceeded, InvalidRequest
from sandboxkit.models import Limits, Status
from sandboxkit.testing import FakeBackend

LIMITS = Limits(timeout_s=10.0)


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with SandboxPool("subprocess", max_concurrency=8, limits=LIMITS) as p:
        yield p
        assert isinstance(p.backend, SubprocessBackend)
    assert p.backend.live_sandboxes == 0 and p.backend.live_snapshots == 0


async def _prepared(pool: SandboxPool) -> Session:
    s = pool.session()
    await s.write_files({"repo/main.py": "print('v1')\n", "repo/README": "hello\n"})
    assert (await s.exec("mkdir -p repo/build && echo built > repo/build/out")).status is Status.OK
    return s


async def test_forks_are_isolated_from_each_other_and_the_parent(pool: SandboxPool) -> None:
    parent = await _prepared(pool)
    forks = await pool.fork(parent, 3)
    assert len({f.sandbox_id for f in forks} | {parent.sandbox_id}) == 4
    await forks[0].write_files({"repo/main.py": "print('v2')\n"})
    await forks[1].exec("rm -r repo/build")
    await parent.write_files({"repo/README": "changed\n"})
    outs = [await f.exec("python3 repo/main.py; cat repo/README; ls repo") for f in forks]
    assert outs[0].stdout == "v2\nhello\nREADME\nbuild\nmain.py\n"
    assert outs[1].stdout == "v1\nhello\nREADME\nmain.py\n"
    assert outs[2].stdout == "v1\nhello\nREADME\nbuild\nmain.py\n"
    assert (await parent.exec("python3 repo/main.py; cat repo/README")).stdout == "v1\nchanged\n"
    for s in [parent, *forks]:
        await s.close()


async def test_closing_the_parent_and_releasing_the_checkpoint_keeps_forks_working(pool: SandboxPool) -> None:
    parent = await _prepared(pool)
    checkpoint = await parent.checkpoint()
    forks = await pool.fork(checkpoint, 2)
    await parent.close()
    await checkpoint.release()
    assert checkpoint.released and pool.metrics()["checkpoints_open"] == 0
    for f in forks:
        r = await f.run("print(open('repo/build/out').read().strip())")
        assert r.stdout == "built\n"
        await f.write_files({"more": "x"})
    with pytest.raises(InvalidRequest, match="released"):
        await pool.fork(checkpoint, 1)
    with pytest.raises(InvalidRequest, match="released"):
        pool.session(from_checkpoint=checkpoint)
    for f in forks:
        await f.close()


async def test_checkpoint_carries_cwd_and_env_and_from_checkpoint_opens_one(pool: SandboxPool) -> None:
    parent = await _prepared(pool)
    async with await parent.checkpoint(cwd="repo", env={"STAGE": "eval"}) as cp:
        assert isinstance(cp, Checkpoint) and cp.cwd == "repo"
        async with pool.session(from_checkpoint=cp) as s:
            r = await s.exec("pwd; echo $STAGE $OTHER; cat build/out", env={"OTHER": "x"})
            assert r.stdout.split()[1:] == ["eval", "x", "built"]
            # A fork's own checkpoint carries the defaults on.
            grandchildren = await pool.fork(s, 2)
            assert [(await g.exec("echo $STAGE")).stdout for g in grandchildren] == ["eval\n", "eval\n"]
            for g in grandchildren:
                await g.close()
    await parent.close()
    m = pool.metrics()
    assert (m["checkpoints_taken"], m["checkpoints_released"], m["forks"], m["checkpoints_open"]) == (2, 2, 3, 0)


async def test_bad_requests_are_clear_errors() -> None:
    async with SandboxPool(FakeBackend()) as fake, fake.session() as s:
        with pytest.raises(InvalidRequest, match="cannot checkpoint or fork"):
            await s.checkpoint()
        with pytest.raises(InvalidRequest, match="cannot checkpoint or fork"):
            await fake.fork(s, 2)
    async with SandboxPool("subprocess") as pool, pool.session() as s:
        for n in (0, -1, 1.5, True):
            with pytest.raises(InvalidRequest, match="n must be"):
                await pool.fork(s, n)  # type: ignore[arg-type]
        async with SandboxPool("subprocess") as other, await s.checkpoint() as cp:
            with pytest.raises(InvalidRequest, match="another pool"):
                await other.fork(cp, 1)


async def test_a_fork_that_cannot_open_leaves_nothing_open(pool: SandboxPool) -> None:
    async with SandboxPool("subprocess", max_sandboxes=3) as small:
        parent = await _prepared(small)
        async with await parent.checkpoint() as cp:
            with pytest.raises(DeadlineExceeded):
                await small.fork(cp, 3, deadline_s=1.0)  # only 2 slots left: all or nothing
            assert small.open_sandboxes == 1
            forks = await small.fork(cp, 2)
            assert small.open_sandboxes == 3
        for s in [parent, *forks]:
            await s.close()


async def test_closing_the_pool_releases_checkpoints_left_open() -> None:
    pool = SandboxPool("subprocess")
    s = await _prepared(pool)
    cp = await s.checkpoint()
    forks = await pool.fork(cp, 2)
    assert pool.metrics()["checkpoints_open"] == 1
    await pool.aclose()
    assert cp.released and pool.open_sandboxes == 0 and len(forks) == 2
    assert isinstance(pool.backend, SubprocessBackend)
    assert pool.backend.live_snapshots == 0 and pool.backend.live_sandboxes == 0


async def test_cancelled_fork_leaves_nothing_open(pool: SandboxPool) -> None:
    parent = await _prepared(pool)
    async with await parent.checkpoint() as cp:
        task = asyncio.ensure_future(pool.fork(cp, 6))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.open_sandboxes == 1
    await parent.close()


def test_sync_twin_forks_too() -> None:
    with SyncSandboxPool("subprocess") as pool, pool.session() as s:
        s.write_files({"a.txt": "one"})
        with s.checkpoint(env={"K": "v"}) as cp:
            forks = pool.fork(cp, 2)
            from_cp = pool.session(from_checkpoint=cp)
            from_cp.open()
            too_late = pool.session(from_checkpoint=cp)
        assert cp.released
        with pytest.raises(InvalidRequest, match="released before this session opened"):
            too_late.exec("true")
        forks[0].write_files({"a.txt": "two"})
        assert [f.read_files(["a.txt"])["a.txt"] for f in forks] == [b"two", b"one"]
        assert from_cp.exec("cat a.txt; echo $K").stdout == "onev\n"
        for f in [*forks, from_cp, *pool.fork(s, 1)]:
            f.close()
        assert pool.metrics()["forks"] == 5


async def test_prometheus_exports_checkpoints_and_forks(pool: SandboxPool) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from sandboxkit.prometheus import prometheus_registry

    registry = prometheus_registry(pool)
    parent = await _prepared(pool)
    kept = await parent.checkpoint()
    released = await parent.checkpoint()
    forks = await pool.fork(released, 3)
    await released.release()
    got = {
        sample.name: sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    assert got["sandboxkit_checkpoints_taken_total"] == 2
    assert got["sandboxkit_checkpoints_released_total"] == 1
    assert got["sandboxkit_checkpoints_open"] == 1
    assert got["sandboxkit_forks_total"] == 3
    for s in [parent, *forks]:
        await s.close()
    await kept.release()
