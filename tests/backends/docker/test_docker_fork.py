"""Checkpoint and fork on the Docker backend (files only): isolation, lifetimes, hostile files, and no leaks."""

from __future__ import annotations

from typing import Any

import pytest

from sandboxkit import SandboxPool
from sandboxkit.backends.docker._fork import ArchiveSnapshot
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Status
from support.docker_engine import FAST, containers_of, leftovers


async def test_fork_capability_says_files_only(backend: Any) -> None:
    caps = backend.capabilities
    assert caps.fork == "files"
    assert any("no CRIU" in note for note in caps.notes)


async def test_forks_are_isolated_and_outlive_parent_and_checkpoint(backend: Any) -> None:
    parent = await backend.open(FAST)
    r = await parent.exec(
        "mkdir -p repo/sub && echo v1 > repo/sub/f && printf '#!/bin/sh\\necho run\\n' > repo/x.sh && chmod +x repo/x.sh && ln -s sub/f repo/link && mkfifo repo/pipe"
    )
    assert r.status is Status.OK, r
    snap = await parent.snapshot()
    assert isinstance(snap, ArchiveSnapshot) and snap.size_bytes > 0
    kids = [await backend.open_from(snap, FAST) for _ in range(2)]
    await parent.write_files({"repo/sub/f": "parent later\n"})
    await kids[0].write_files({"repo/sub/f": "kid0\n", "repo/new": "n"})
    await parent.close()
    await snap.release()
    r0 = await kids[0].exec("cat repo/sub/f repo/link; ls repo")
    r1 = await kids[1].exec(
        "cat repo/sub/f; readlink repo/link; ./repo/x.sh; test -p repo/pipe && echo pipe; stat -c %U repo/sub/f; ls repo"
    )
    assert r0.stdout == "kid0\nkid0\nlink\nnew\npipe\nsub\nx.sh\n"
    assert r1.stdout == "v1\nsub/f\nrun\npipe\nsandbox\nlink\npipe\nsub\nx.sh\n", r1
    with pytest.raises(InvalidRequest, match="released"):
        await backend.open_from(snap, FAST)
    for k in kids:
        await k.close()


async def test_pool_fork_on_docker_leaves_nothing(test_labels: dict[str, str], docker_client: Any) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels)
    async with SandboxPool(backend, limits=FAST) as pool:
        async with pool.session() as s:
            await s.write_files({"state.txt": "prepared"})
            forks = await pool.fork(s, 3)
        for i, f in enumerate(forks):
            await f.write_files({"mine.txt": f"fork {i}"})
        outs = [(await f.exec("cat state.txt; echo; cat mine.txt")).stdout for f in forks]
        assert outs == [f"prepared\nfork {i}" for i in range(3)]
        for f in forks:
            await f.close()
    await backend.aclose()
    assert backend.checkpoints == set()
    assert leftovers(docker_client, test_labels) == (0, 0)


# What a used container leaves for the next tenant if its reset misses anything: a file in the
# workspace, /tmp and /dev/shm, and a SysV shared memory segment (processes die with each command).
_DIRTY = "echo old > left; echo old > /tmp/left; echo old > /dev/shm/left; ipcmk -M 4096 >/dev/null"
_LOOK = "ls -A; ls -A /tmp /dev/shm; ipcs -m | grep -c '^0x' || true"


async def test_warm_fork_reuses_idle_containers_as_clean_as_new_ones(
    test_labels: dict[str, str], docker_client: Any
) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels)
    assert backend.capabilities.fork_warm
    async with SandboxPool(backend, limits=FAST, warm=3, max_sandboxes=3) as pool:
        parent = pool.session()
        await parent.write_files({"state.txt": "prepared"})
        checkpoint = await parent.checkpoint()
        dirty = await pool.exec(_DIRTY)  # a pooled run: its container is reset and goes back idle, on top
        assert dirty.status is Status.OK, dirty
        forks = await pool.fork(checkpoint, 2)
        # No container started for the forks: they are the two idle ones, the used one among them.
        assert pool.metrics()["sandboxes_created"] == 3
        assert len({parent.sandbox_id, *(f.sandbox_id for f in forks)}) == 3
        await forks[0].write_files({"mine.txt": "fork 0"})
        await parent.write_files({"state.txt": "parent later"})
        await parent.close()
        await checkpoint.release()
        looks = [(await f.exec(_LOOK)).stdout for f in forks]
        assert looks[1] == "state.txt\n/dev/shm:\n\n/tmp:\n0\n", looks  # the checkpoint's files, nothing else
        assert looks[0] == "mine.txt\nstate.txt\n/dev/shm:\n\n/tmp:\n0\n", looks
        assert [(await f.read_files(["state.txt"]))["state.txt"] for f in forks] == [b"prepared"] * 2
        for f in forks:
            await f.close()
        # A closed fork is reset and kept warm: the next tenant sees an empty workspace.
        assert pool.metrics()["sandboxes_idle"] == 3
        after = await pool.exec("ls -A")
        assert after.stdout == "" and pool.metrics()["sandboxes_created"] == 3
    await backend.aclose()
    assert leftovers(docker_client, test_labels) == (0, 0)


async def test_warm_fork_into_a_vanished_container_opens_a_new_one(
    test_labels: dict[str, str], docker_client: Any
) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels)
    # No liveness check before lease: the unpack itself meets the missing container.
    async with SandboxPool(backend, limits=FAST, warm=2, max_sandboxes=2, health_check_after_s=3600) as pool:
        async with pool.session() as parent:
            await parent.write_files({"state.txt": "prepared"})
            async with await parent.checkpoint() as checkpoint:
                idle = [c for c in containers_of(docker_client, test_labels) if not c.startswith(parent.sandbox_id)]
                assert len(idle) == 1
                docker_client.api.remove_container(idle[0], force=True)
                [fork] = await pool.fork(checkpoint, 1)
        assert not idle[0].startswith(fork.sandbox_id)
        assert (await fork.read_files(["state.txt"]))["state.txt"] == b"prepared"
        assert pool.metrics()["errors"].get("restore_failed") == 1
        await fork.close()
    await backend.aclose()
    assert leftovers(docker_client, test_labels) == (0, 0)


async def test_restore_refuses_what_it_cannot_load(backend: Any) -> None:
    from sandboxkit.backends.docker import DockerBackend

    one, two = await backend.open(FAST), await backend.open(FAST)
    await one.write_files({"f": "x"})
    snap = await one.snapshot()
    await snap.release()
    assert await two.restore(snap) is False  # released: nothing touched, the sandbox still works
    other = DockerBackend(labels=backend.extra_labels)
    three = await other.open(FAST)
    foreign = await three.snapshot()
    assert await two.restore(foreign) is False  # another backend object's
    assert (await two.exec("ls -A")).stdout == ""
    snap = await one.snapshot()
    await two.close()
    assert await two.restore(snap) is False  # closed
    for s in (one, three, foreign, snap):
        await (s.release() if hasattr(s, "release") else s.close())
    await other.aclose()


async def test_releasing_the_checkpoint_mid_fork_is_all_or_nothing(
    test_labels: dict[str, str], docker_client: Any
) -> None:
    import anyio

    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels)
    files = {f"d/f{i}": bytes([i]) * 200_000 for i in range(50)}  # 10 MB: the unpacks take a while
    async with SandboxPool(backend, limits=FAST, warm=5, max_sandboxes=5) as pool:
        async with pool.session() as parent:
            await parent.write_files(files)
            checkpoint = await parent.checkpoint()
        outcome: list[Any] = []

        async def fork() -> None:
            try:
                outcome.append(await pool.fork(checkpoint, 4))
            except InvalidRequest as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(fork)
            await anyio.sleep(0.05)  # the unpacks are under way (or about to start)
            await checkpoint.release()
        [got] = outcome
        if isinstance(got, InvalidRequest):  # a fork had not started reading: none is left open
            assert "released" in str(got) and pool.metrics()["sandboxes_open"] == pool.metrics()["sandboxes_idle"]
        else:  # every unpack in flight finished from its own view of the archive
            for f in got:
                assert await f.read_files(["d/f7", "d/f49"]) == {"d/f7": files["d/f7"], "d/f49": files["d/f49"]}
                await f.close()
    await backend.aclose()
    assert backend.checkpoints == set()
    assert leftovers(docker_client, test_labels) == (0, 0)


async def test_a_released_checkpoint_costs_at_most_one_warm_container(
    test_labels: dict[str, str], docker_client: Any
) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels)
    async with SandboxPool(backend, limits=FAST, warm=4, max_sandboxes=4) as pool:
        async with pool.session() as parent:
            await parent.write_files({"state.txt": "prepared"})
            checkpoint = await parent.checkpoint()
        await checkpoint.release()
        # What a fork that lost the race with release() meets (a session checks first; the pool core does not).
        with pytest.raises(InvalidRequest, match="released"):
            await pool._core.lease(FAST, snapshot=checkpoint.snapshot)
        assert pool.metrics()["errors"].get("restore_failed") == 1
        assert pool.metrics()["sandboxes_idle"] == 3  # one load failed, then no other idle container was tried
    await backend.aclose()
    assert leftovers(docker_client, test_labels) == (0, 0)
