"""Checkpoint and fork on the Docker backend (files only): isolation, lifetimes, hostile files, and no leaks."""

from __future__ import annotations

from typing import Any

import pytest

from sandboxkit import SandboxPool
from sandboxkit.backends.docker._fork import ArchiveSnapshot
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Status
from support.docker_engine import FAST, leftovers


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
    assert backend._snapshots == set()
    assert leftovers(docker_client, test_labels) == (0, 0)
